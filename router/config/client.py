"""Configuration of the sender and receiver libraries from a plain librdkafka dict (pure).

`Sender` and `Receiver` take the dict a confluent-kafka `Producer` or `Consumer` would
take. What the guarantees depend on is added, and a dict that contradicts it is refused
with a ConfigError (a ValueError) naming the property, instead of being silently
overridden:

| client   | set (another value in the dict is a ConfigError)                         |
|----------|--------------------------------------------------------------------------|
| Sender   | `enable.idempotence=true`, `acks=all`; no `transactional.id`              |
| Receiver | `isolation.level=read_committed`, `enable.auto.offset.store=false`; and a |
|          | `group.id` is required                                                   |

Defaults the dict may change: the sender's `linger.ms` (5) and `compression.type` (lz4);
the receiver's `enable.auto.commit` (true: stored offsets, that is processed messages,
every `auto.commit.interval.ms`, 1000) and `auto.offset.reset` (earliest).

A topology's queues are found by name: the send queues `<name>.send.<n>` and receive
queues `<name>.recv.<n>` that `router topics create` makes for a topology that does not
name its own, and its send units' consumer group `<name>.send-units`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from router.config.settings import TopologySettings
from router.errors import ConfigError, NotReady

# Properties of one client kind only: left out of the helper clients (the admin client
# and committed-offset reader a Sender runs beside its producer), which librdkafka would
# otherwise warn about.
PRODUCER_ONLY = frozenset(
    {
        "acks",
        "request.required.acks",
        "enable.idempotence",
        "enable.gapless.guarantee",
        "transactional.id",
        "transaction.timeout.ms",
        "linger.ms",
        "queue.buffering.max.ms",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "batch.num.messages",
        "batch.size",
        "compression.type",
        "compression.codec",
        "compression.level",
        "message.timeout.ms",
        "delivery.timeout.ms",
        "request.timeout.ms",
        "retries",
        "message.send.max.retries",
        "max.in.flight.requests.per.connection",
        "max.in.flight",
        "partitioner",
        "sticky.partitioning.linger.ms",
        "delivery.report.only.error",
        "dr_cb",
        "dr_msg_cb",
        "on_delivery",
        # A Sender's statistics are its producer's: the helper clients' would mix in.
        "statistics.interval.ms",
        "stats_cb",
    }
)
CONSUMER_ONLY = frozenset(
    {
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.remote.assignor",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "isolation.level",
        "enable.partition.eof",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "fetch.wait.max.ms",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.message.max.bytes",
        "check.crcs",
        "on_commit",
    }
)

Side = Literal["send", "receive"]


def _flag(value: Any) -> bool:
    """A librdkafka boolean as the dict gives it (True, "true", "1", ...)."""
    return str(value).strip().lower() in ("true", "1", "t", "yes", "on")


def _require(config: Mapping[str, Any], key: str, ok: bool, needed: str, why: str) -> None:
    if key in config and not ok:
        raise ConfigError(f"{key}={config[key]!r} is not allowed: {why} needs {key}={needed}")


def producer_config(config: Mapping[str, Any], client_id: str) -> dict[str, Any]:
    """The Sender's producer: the defaults < `config` < idempotence and acks=all (a group's
    order survives retries only with both); ConfigError if `config` says otherwise."""
    _require(
        config,
        "enable.idempotence",
        _flag(config.get("enable.idempotence")),
        "true",
        "a group's order across retries",
    )
    for key in ("acks", "request.required.acks"):
        value = str(config.get(key, "all")).strip().lower()
        _require(config, key, value in ("all", "-1"), "all", "a group's order across retries")
    if "transactional.id" in config:
        raise ConfigError(
            "transactional.id is not allowed: the Sender produces with an idempotent "
            "producer, outside transactions (use confluent_kafka.Producer for those)"
        )
    return {
        "linger.ms": 5,
        "compression.type": "lz4",
        "client.id": client_id,
        **config,
        "enable.idempotence": True,
        "acks": "all",
    }


def consumer_config(config: Mapping[str, Any], client_id: str) -> dict[str, Any]:
    """The Receiver's consumer: the defaults (`fetch.queue.backoff.ms` 10, not
    librdkafka's 1,000) < `config` < committed reads and offsets stored only for processed
    messages; ConfigError if `config` says otherwise or has no
    `group.id` (the consumer group whose committed offsets say what was processed)."""
    if not config.get("group.id"):
        raise ConfigError("group.id is required: the receiver commits what it processed there")
    isolation = str(config.get("isolation.level", "read_committed")).strip().lower()
    _require(
        config,
        "isolation.level",
        isolation == "read_committed",
        "read_committed",
        "exactly-once delivery (no aborted record)",
    )
    _require(
        config,
        "enable.auto.offset.store",
        not _flag(config.get("enable.auto.offset.store")),
        "false",
        "committing only processed messages",
    )
    return {
        "client.id": client_id,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
        "auto.offset.reset": "earliest",
        # librdkafka's 1,000 ms: once the prefetch queue is full it fetches nothing for a
        # second, and a reader that empties it faster waits (a backlog of 1 KB records read
        # through `process`: about 76,000 msg/s with it, 140,000 with 10 ms)
        "fetch.queue.backoff.ms": 10,
        **config,
        "isolation.level": "read_committed",
        "enable.auto.offset.store": False,
    }


def connection_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` without producer- or consumer-only properties: for helper clients (an
    admin client, a committed-offset reader) that share the connection settings."""
    return {k: v for k, v in config.items() if k not in PRODUCER_ONLY | CONSUMER_ONLY}


def _topology(name: str) -> TopologySettings:
    """Topology `name`'s settings; ConfigError (pydantic's ValidationError as its cause,
    with the same message) for a name no topology can have."""
    try:
        return TopologySettings(name=name)
    except ValidationError as exc:
        raise ConfigError(str(exc)) from exc


def _pattern(name: str, side: Side) -> re.Pattern[str]:
    _topology(name)  # ConfigError for a name no topology can have
    return re.compile(rf"^{re.escape(name)}\.{'send' if side == 'send' else 'recv'}\.(\d+)$")


def topology_queues(name: str, side: Side, topics: Iterable[str]) -> list[str]:
    """Topology `name`'s send (or receive) queues among `topics`, in number order:
    `<name>.send.<n>` (`<name>.recv.<n>`), the names `router topics create` derives."""
    pattern = _pattern(name, side)
    found = [(int(m.group(1)), t) for t in topics if (m := pattern.match(t))]
    return [t for _, t in sorted(found)]


def discover_send_queues(
    admin: Any, queues: Sequence[str] | None, topology: str | None
) -> tuple[list[str], list[tuple[str, int]]]:
    """The send queues (given, or the topology's) and their partitions, from the broker's
    metadata (`admin`: an AdminClient); NotReady if they do not exist."""
    meta = admin.list_topics(timeout=30).topics
    if not queues:
        queues = topology_queues(str(topology), "send", meta)
        if not queues:
            raise NotReady(
                f"topology {topology!r} has no send queues {topology}.send.<n> "
                "(run `router topics create` first, or give send_queues)"
            )
    missing = [q for q in queues if q not in meta]
    if missing:
        raise NotReady(f"send queues {missing} do not exist (run `router topics create` first)")
    return list(queues), [(q, p) for q in queues for p in sorted(meta[q].partitions)]


def units_group(name: str) -> str:
    """The consumer group of topology `name`'s send units (the backlog is measured
    against its committed offsets)."""
    return _topology(name).send_group
