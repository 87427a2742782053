"""Configuration: one frozen, typed settings object, built once at the entry point.

Sources, highest precedence first: keyword arguments, environment variables
(`ROUTER_` prefix, `__` between levels, e.g. `ROUTER_KAFKA__BOOTSTRAP_SERVERS`), then a
TOML file (`--config` / `ROUTER_CONFIG`). Nothing here reads the environment at import
time. Secrets are `SecretStr`: printing the settings never shows them.
"""

from __future__ import annotations

import os
from pathlib import Path
from tomllib import TOMLDecodeError
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from router.config.registry import RegistrySettings
from router.config.servers import (
    SECRET_CLIENT_KEYS,
    KafkaSettings,
    RedisSettings,
    _Section,
    read_secret,
)
from router.config.topology import TopologySettings, check_cells
from router.config.tracing import TracingSettings
from router.errors import ConfigError, ConfigNotFound

__all__ = [
    "SECRET_CLIENT_KEYS",
    "KafkaSettings",
    "MetricsSettings",
    "PrioritySettings",
    "RedisSettings",
    "RegistrySettings",
    "RouterSettings",
    "RoutingSettings",
    "SweeperSettings",
    "TopologySettings",
    "TracingSettings",
    "UnitSettings",
    "load_settings",
    "read_secret",
]


class RoutingSettings(_Section):
    # What a new group or an ordinary message gets when every destination is in charge of
    # an open group: "wait" (the default) parks it in the waiting room (off its source
    # partition) until a destination frees, first come first served: nothing is ever
    # interleaved. "share" takes the least-loaded one (order kept, interleaving allowed,
    # counted as shared); "hold" holds the message (and its source partition) until a
    # destination frees, for at most hold_timeout_ms, after which it is shared. See
    # docs/explanation/routing.md.
    busy_policy: Literal["share", "hold", "wait"] = "wait"
    # Under "wait", each lane (source partition) prefers a home destination among the
    # cheapest, when a side has at least as many source partitions as destinations, so that
    # one lane's ordinary messages do not fence another lane's next group into the room
    # (router/table/choice.py `home`). False: the rotating cursor alone breaks ties.
    lane_homes: bool = True
    # A unit remembers its groups whose entry the route script would leave as it is, and
    # decides their plain members without sending them (router/table/store/memory.py;
    # docs/explanation/routing.md). False: every message is sent to Redis.
    remember_groups: bool = True
    # Partitions of each side's room topic: a group's parked messages stay on one.
    room_partitions: int = Field(4, ge=1, le=256)
    # A group waiting longer than this (0: no limit) gets a GroupWaitTimedOut event (and the
    # wait_timeouts metric counts it); then by default ("report") it keeps waiting, never
    # interleaved; or it is "share"d (admitted to the least-loaded busy destination,
    # counted as shared: the promise given up for it) or "dead-letter"ed (its parked and
    # later messages, with the reason). A lane's waiting ordinary messages wait too under
    # "report", and are shared under the other two. The sweeper decides.
    max_wait_ms: int = Field(120_000, ge=0)
    wait_timeout_policy: Literal["report", "share", "dead-letter"] = "report"
    hold_timeout_ms: int = Field(10_000, ge=0)
    hold_retry_ms: int = Field(100, ge=10)
    # Entry deletion time (TTL): an entry idle this long is swept as abandoned.
    default_ttl_ms: int = Field(300_000, ge=1)
    # TTL by message type (header "message-type"); a type not listed is bad input.
    ttl_by_type: dict[str, int] = Field(default_factory=dict)
    # Bounds for the per-message TTL header ("guarantee-ttl-ms").
    min_ttl_ms: int = Field(1_000, ge=1)
    max_ttl_ms: int = Field(7 * 24 * 3600 * 1000, ge=1)
    max_guarantee_id_bytes: int = Field(256, ge=1, le=4096)
    # A bad message inside a group: "dead-letter" it and let the group continue, or
    # "stop-group": dead-letter it, park every later message of the group in order, and
    # raise a GroupStopped event. By message type, else the default; a group can choose
    # with the guarantee-on-poison header.
    poison_policy: Literal["dead-letter", "stop-group"] = "dead-letter"
    poison_policy_by_type: dict[str, Literal["dead-letter", "stop-group"]] = Field(
        default_factory=dict
    )
    # Message types whose payload must decode with an Avro schema from schemas/ (its full
    # name); checked by the send units, so undecodable payloads never enter the path.
    schema_by_type: dict[str, str] = Field(default_factory=dict)
    # Message types whose payload is registry-framed (magic byte, schema ID, Avro body): the
    # ID's schema must be a version of this registry subject (registry.url) and the body
    # must decode with it; checked by the send units like schema_by_type.
    subject_by_type: dict[str, str] = Field(default_factory=dict)
    # Whole-group delivery for groups that do not say (header "guarantee-delivery"), by
    # message type, else the default: "complete" stages a group in the waiting room until
    # its final and then writes it whole to one destination (needs busy_policy "wait");
    # "stream" forwards members as they arrive.
    default_delivery: Literal["stream", "complete"] = "stream"
    delivery_by_type: dict[str, Literal["stream", "complete"]] = Field(default_factory=dict)
    # A staged group that parks this many messages without its final stops being staged:
    # a GroupStagingAborted event, and it waits as a streamed group (in order, never
    # interleaved, but no longer written in one transaction).
    max_staged_messages: int = Field(10_000, ge=1)
    # Logical order for groups that do not say (header "guarantee-order"): "logical"
    # delivers a group's members in guarantee-seq order whatever send-queue partition or
    # physical order they come in (members with no guarantee-seq keep the lane rule);
    # "lane": one send-queue partition, in physical order.
    default_order: Literal["lane", "logical"] = "lane"
    # Logical order: a missing sequence number that blocks a group this long gives a
    # SequenceGap event, then "park" (the group keeps waiting for it, until its TTL) or
    # "deliver" (what is parked goes out in order, past the gaps).
    gap_timeout_ms: int = Field(30_000, ge=0)
    gap_policy: Literal["park", "deliver"] = "park"
    # Per-message lifetime (headers message-expires-at, message-lifetime-ms; see
    # router/contract/lifetime.py): bounds of a relative lifetime, and what an expired member does
    # to its group when it does not say (header message-on-expiry): "skip" it (the group
    # goes on) or "expire-group" (the group stops there, as under stop-group).
    min_lifetime_ms: int = Field(1, ge=1)
    max_lifetime_ms: int = Field(30 * 24 * 3600 * 1000, ge=1)
    on_expiry: Literal["skip", "expire-group"] = "skip"

    @model_validator(mode="after")
    def _ttls_in_bounds(self) -> RoutingSettings:
        if self.min_ttl_ms > self.max_ttl_ms:
            raise ConfigError("min_ttl_ms must not exceed max_ttl_ms")
        if self.min_lifetime_ms > self.max_lifetime_ms:
            raise ConfigError("min_lifetime_ms must not exceed max_lifetime_ms")
        for kind, ttl in {"(default)": self.default_ttl_ms, **self.ttl_by_type}.items():
            if not self.min_ttl_ms <= ttl <= self.max_ttl_ms:
                raise ConfigError(f"TTL of message type {kind} ({ttl} ms) is outside the bounds")
        both = sorted(set(self.schema_by_type) & set(self.subject_by_type))
        if both:
            raise ConfigError(f"schema_by_type and subject_by_type both name {both}: one each")
        unknown = sorted(set(self.delivery_by_type) - set(self.ttl_by_type))
        if unknown:
            raise ConfigError(f"delivery_by_type names message types not in ttl_by_type: {unknown}")
        wants = {self.default_delivery, *self.delivery_by_type.values()}
        if "complete" in wants and self.busy_policy != "wait":
            raise ConfigError(
                'complete delivery stages groups in the waiting room: it needs busy_policy "wait"'
            )
        return self


class UnitSettings(_Section):
    batch_size: int = Field(500, ge=1, le=100_000)
    # Under a backlog (a batch polled full) the next batch may take twice as many, up to
    # this; back towards batch_size once batches come back a quarter full
    # (router/unit/batching.py). At most batch_size: batches never grow. 1,000 (the
    # default) carried half as much again as 500 through a unit and cost Redis a fifth less
    # per grouped message; 2,000 no more (docs/explanation/performance.md).
    max_batch_size: int = Field(1_000, ge=1, le=100_000)
    # ... and at most about this many bytes of values (large messages, segments: a unit
    # holds a few batches, and prefetches twice this much).
    max_batch_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024, le=1 << 30)
    # How long a unit waits for the first message of a batch; the rest of a batch is
    # whatever has already been fetched.
    poll_timeout_ms: int = Field(100, ge=1)
    # Decide (poll, classify, route) the next batch while the previous one commits. Faster
    # (see the README's performance section), but a finished group's destination is freed
    # one batch later, so under saturation more placements share a busy destination.
    overlap_commit: bool = True
    # ... but only while there is a backlog: a batch in flight with fewer messages than
    # this commits before the next poll. At a light load the next message would wait for
    # that commit anyway, and deciding it meanwhile competes with the commit for the GIL
    # and the cores (docs/explanation/performance.md: 91.6 -> 38.5 ms p50 at 1,000 msg/s). A unit
    # that falls behind polls larger batches and overlaps again. 0: always overlap.
    overlap_min_batch: int = Field(100, ge=0)
    # Back-off while Redis or the broker is unreachable.
    backoff_initial_ms: int = Field(200, ge=1)
    backoff_max_ms: int = Field(5_000, ge=1)
    metrics_interval_ms: int = Field(1_000, ge=100)

    def overlaps(self, batch_messages: int) -> bool:
        """Whether the next batch is decided while one of this many messages commits."""
        return self.overlap_commit and batch_messages >= self.overlap_min_batch


class SweeperSettings(_Section):
    interval_ms: int = Field(1_000, ge=10)
    batch: int = Field(1_000, ge=1)
    # A final message whose entry is still "closing" this long after it was routed had its
    # release interrupted; the sweeper releases it once its transaction is committed.
    closing_grace_ms: int = Field(5_000, ge=0)
    # Callers of the route script (one per unit process ever started) silent this long leave
    # the tables' writers hashes (router.table.store.writers). Units read it too: one idle for
    # half of it skips the lost-write check once. Every process of a topology needs the same.
    writer_idle_s: int = Field(86_400, ge=60)


def check_bands(bands: int, min_share: float) -> None:
    """ConfigError unless `bands` priority bands with a minimum share of `min_share` each
    leave the highest band at least half of a unit's batches (`router.contract.bandsched`)."""
    if bands < 1:
        raise ConfigError("bands must be at least 1")
    if not 0 < min_share <= 1:
        raise ConfigError("min_share must be in (0, 1]")
    if bands > 1 and min_share * (bands - 1) > 0.5:
        raise ConfigError(
            f"min_share {min_share} x {bands - 1} lower bands leaves the highest band with a "
            "backlog less than half of the batches: at most 0.5 / (bands - 1)"
        )


class PrioritySettings(_Section):
    # Priority bands (router/contract/priority.py, docs/explanation/priority.md): 1 = none; N > 1
    # adds the topics <topic>.p1 .. <topic>.p<N-1> beside every send queue, the transfer topic and
    # every receive queue. Header message-priority 0..9 falls in band priority * N // 10.
    bands: int = Field(1, ge=1, le=10)
    # Each lower band with a backlog gets at least this share of a unit's batches
    # (router/contract/bandsched.py); at most 0.5 / (bands - 1).
    min_share: float = Field(0.1, gt=0, le=0.5)

    @model_validator(mode="after")
    def _shares_fit(self) -> PrioritySettings:
        check_bands(self.bands, self.min_share)
        return self


class MetricsSettings(_Section):
    # Prometheus metrics, /healthz and /readyz over HTTP (`router.metrics.prom`); 0: not served.
    # One port per process: give each process on a host its own.
    port: int = Field(0, ge=0, le=65_535)
    host: str = "127.0.0.1"
    # /healthz fails once the loop has not come round for this long (a unit's commit may
    # wait 45 s for a broker that does not answer; the sweeper adds its interval).
    liveness_timeout_s: float = Field(90.0, gt=0)


class RouterSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ROUTER_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    topology: TopologySettings = Field(default_factory=TopologySettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    unit: UnitSettings = Field(default_factory=UnitSettings)
    sweeper: SweeperSettings = Field(default_factory=SweeperSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    priority: PrioritySettings = Field(default_factory=PrioritySettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    registry: RegistrySettings = Field(default_factory=RegistrySettings)

    @model_validator(mode="after")
    def _registry_for_subjects(self) -> RouterSettings:
        if self.routing.subject_by_type and self.registry.url is None:
            raise ConfigError("routing.subject_by_type needs registry.url (a Schema Registry)")
        check_cells(self.topology, self.routing.room_partitions, self.routing.gap_policy)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_file = settings_cls.model_config.get("toml_file")
        if toml_file:
            sources.append(TomlConfigSettingsSource(settings_cls))
        return tuple(sources)


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> RouterSettings:
    """Build the settings once: overrides > environment > TOML file > defaults.

    `config_file` defaults to the ROUTER_CONFIG environment variable, if set. Settings that
    contradict themselves, or a TOML file or environment variable that cannot be read,
    raise ConfigError, with the same message as the error it wraps (its `__cause__`:
    pydantic's ValidationError, pydantic-settings' SettingsError, a TOMLDecodeError); a
    missing file raises ConfigNotFound (a FileNotFoundError).
    """
    path = config_file or os.environ.get("ROUTER_CONFIG")
    try:
        if not path:
            return RouterSettings(**overrides)
        file = Path(path)
        if not file.is_file():
            raise ConfigNotFound(f"configuration file not found: {file}")

        class _FromFile(RouterSettings):
            model_config = SettingsConfigDict(**{**RouterSettings.model_config, "toml_file": file})

        return _FromFile(**overrides)
    except (ValidationError, SettingsError, TOMLDecodeError) as exc:
        raise ConfigError(str(exc)) from exc
