"""A whole routing topology as processes: topics, send units, receive units, a sweeper.

Used by the demo, the chaos and benchmark drivers and the multi-process tests:

    with Pipeline(base_settings, PipelineSpec(...), run_dir) as p:
        ... send with p.settings, read receive queues ...
        p.stop()          # SIGTERM every process; exit codes in p.exit_codes,
                          # the instant the last one was gone in p.stopped_at

One clock for every destination: `start` sets `message.timestamp.type=LogAppendTime` on
the topics the router writes, the transfer topic (the send side's destinations) and the
receive queues (the receive side's), before any unit runs. Every record there then
carries the broker's append time, which the capacity rule of `ops.harness.verdict.capacity` needs
(when a record landed, when a destination was busy). Send queues keep CreateTime (the
senders' clock, on the same machine in these runs). This is the harness's choice, not a
product default: `router topics create` makes every topic CreateTime, and the router
works with either.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from ops.harness.stack.fleet import Fleet
from router.backends.kafka import clients
from router.backends.redis.client import redis_client
from router.config import RouterSettings, load_settings
from router.contract.priority import band_topics
from router.metrics.registry import read_all
from router.table.store.management import Side
from router.topology.cells import all_cells
from router.topology.side import side_spec, table_for
from router.topology.topics import ensure_topics, plan

log = logging.getLogger("router.pipeline")


@dataclass(frozen=True)
class PipelineSpec:
    send_units: int = 2  # processes
    receive_units: int = 3  # processes
    sweepers: int = 1
    send_queues: int = 2
    send_queue_partitions: int = 3
    transfer_partitions: int = 6  # receive-side transfer units (destinations of the send side)
    receive_queues: int = 6
    busy_policy: Literal["share", "hold", "wait"] = "wait"  # the router's default
    default_ttl_ms: int = 300_000
    extra_env: dict[str, str] = field(default_factory=dict)
    # Per role ("send-unit", "receive-unit", "sweeper"), on top of extra_env: e.g. each
    # role's own Kafka and Redis user on a secured stack (tests/integration/secure).
    role_env: dict[str, dict[str, str]] = field(default_factory=dict)
    metrics: bool = False  # each process serves Prometheus metrics on a free port


def sentinel_env(base: RouterSettings) -> dict[str, str]:
    """The Sentinel or Redis Cluster settings (and the wait for replicas) of `base`, for
    the processes."""
    r = base.redis
    env = {}
    if r.cluster_nodes:
        env["ROUTER_REDIS__CLUSTER_NODES"] = json.dumps(list(r.cluster_nodes))
    if r.sentinels:
        env["ROUTER_REDIS__SENTINELS"] = json.dumps(list(r.sentinels))
        env["ROUTER_REDIS__SENTINEL_SERVICE"] = str(r.sentinel_service)
    if r.min_replica_acks:
        env["ROUTER_REDIS__MIN_REPLICA_ACKS"] = str(r.min_replica_acks)
        env["ROUTER_REDIS__REPLICA_ACK_TIMEOUT_MS"] = str(r.replica_ack_timeout_ms)
    return env


class Pipeline:
    def __init__(
        self,
        base: RouterSettings | None,
        spec: PipelineSpec,
        run_dir: Path,
        *,
        config_file: Path | None = None,
        name: str | None = None,
        keep: bool = False,
        command: Sequence[str] | None = None,
        cwd: Path | None = None,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        """`command`, `cwd` and `base_env` choose the `router` the processes run, where, and
        the environment beneath the run's ROUTER_* variables (see `Fleet`)."""
        self.spec = spec
        self.name = name or f"run-{secrets.token_hex(3)}"
        self.run_dir = run_dir
        self.keep = keep
        run_dir.mkdir(parents=True, exist_ok=True)
        if config_file is None:
            config_file = run_dir / "router.toml"
            config_file.write_text("# settings come from ROUTER_* variables\n")
        self.env = {
            "ROUTER_TOPOLOGY__NAME": self.name,
            "ROUTER_TOPOLOGY__SEND_QUEUE_COUNT": str(spec.send_queues),
            "ROUTER_TOPOLOGY__SEND_QUEUE_PARTITIONS": str(spec.send_queue_partitions),
            "ROUTER_TOPOLOGY__RECEIVE_UNITS": str(spec.transfer_partitions),
            "ROUTER_TOPOLOGY__RECEIVE_QUEUE_COUNT": str(spec.receive_queues),
            "ROUTER_ROUTING__BUSY_POLICY": spec.busy_policy,
            "ROUTER_ROUTING__DEFAULT_TTL_MS": str(spec.default_ttl_ms),
            **spec.extra_env,
        }
        if base is not None:
            # The processes must reach the same servers as this one.
            self.env.setdefault("ROUTER_KAFKA__BOOTSTRAP_SERVERS", base.kafka.bootstrap_servers)
            self.env.setdefault("ROUTER_REDIS__URL", base.redis.url)
            self.env.setdefault("ROUTER_REDIS__KEY_PREFIX", base.redis.key_prefix)
            self.env.update({k: v for k, v in sentinel_env(base).items() if k not in self.env})
        self.settings = self._settings(config_file)
        self.fleet = Fleet(
            config_file,
            run_dir / "logs",
            self.env,
            metrics=spec.metrics,
            command=command,
            cwd=cwd,
            base_env=base_env,
        )
        self.exit_codes: dict[str, int] = {}
        self.stopped_at: float | None = None  # time.monotonic() when the last one was gone
        self._admin = AdminClient(clients.admin_config(self.settings.kafka))
        self._started = False

    def _settings(self, config_file: Path) -> RouterSettings:
        def nested(env: dict[str, str]) -> dict[str, Any]:
            out: dict[str, Any] = defaultdict(dict)
            for key, value in env.items():
                section, _, field_name = key.removeprefix("ROUTER_").lower().partition("__")
                # As pydantic-settings reads the environment: complex values are JSON.
                out[section][field_name] = json.loads(value) if value[:1] in "{[" else value
            return dict(out)

        return load_settings(config_file, **nested(self.env))

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Pipeline:
        self.start()
        return self

    def __del__(self) -> None:
        if "_admin" in self.__dict__:
            clients.dispose_in_background([self.__dict__.pop("_admin")])

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if not self.keep:
            self.cleanup()

    def start(self, ready_timeout: float = 90.0) -> None:
        self.prepare()
        env = self.spec.role_env
        self.fleet.start("send-unit", self.spec.send_units, env.get("send-unit"))
        self.fleet.start("receive-unit", self.spec.receive_units, env.get("receive-unit"))
        if self.spec.sweepers:
            self.fleet.start("sweeper", self.spec.sweepers, env.get("sweeper"))
        self.wait_ready(ready_timeout)

    def prepare(self) -> None:
        """The run's topics, fresh, with LogAppendTime where judged; no process yet (a
        test may start the roles one at a time with `fleet.start`)."""
        if not self._started:
            self.refuse_leftovers()
            self._started = True
        ensure_topics(self.settings, self._admin)
        self.use_append_time()

    def refuse_leftovers(self, timeout: float = 30.0) -> None:
        """A run's verdict reads its topics from the beginning: topics of the same name
        left by an earlier run (one killed before its cleanup) would be judged with it.
        Topics named by the run (its name's prefix) only: one passed in by name (the
        bench's filled topic) exists on purpose."""
        existing = self._admin.list_topics(timeout=timeout).topics
        mine = [s.name for s in plan(self.settings) if s.name.startswith(f"{self.name}.")]
        left = sorted(n for n in mine if n in existing)
        if left:
            raise RuntimeError(
                f"run {self.name}: its topics already exist ({', '.join(left)}), left by an "
                "earlier run of the same name: delete them (Pipeline(...).cleanup()) or "
                "choose another name"
            )

    def use_append_time(self, timeout: float = 30.0) -> None:
        """LogAppendTime on the transfer topic and the receive queues (see the module's
        docstring); returns once the broker describes them so."""
        t, bands = self.settings.topology, self.settings.priority.bands
        names = [b for n in (t.transfer_topic, *t.receive_queues) for b in band_topics(n, bands)]
        entry = ConfigEntry(
            "message.timestamp.type",
            "LogAppendTime",
            incremental_operation=AlterConfigOpType.SET,
        )
        resources = [
            ConfigResource(ResourceType.TOPIC, n, incremental_configs=[entry]) for n in names
        ]
        for future in self._admin.incremental_alter_configs(resources).values():
            future.result(timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            described = self._admin.describe_configs(
                [ConfigResource(ResourceType.TOPIC, n) for n in names]
            )
            pending = [
                r.name
                for r, future in described.items()
                if future.result(timeout=timeout)["message.timestamp.type"].value != "LogAppendTime"
            ]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"LogAppendTime not in effect on {pending} in {timeout}s")
            time.sleep(0.1)

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until every unit process has joined its group and every partition of its sources
        and of its waiting room is assigned."""
        deadline = time.monotonic() + timeout
        sides: tuple[Side, ...] = ("send", "receive")
        for side in sides:
            spec = side_spec(self.settings, side)
            meta = self._admin.list_topics(timeout=30).topics
            # the sources, and the side's waiting room, which its units consume too: until
            # its partitions are assigned again after the units' start-up rebalances, nobody
            # drains the room (about a second, seen as a stall of parked groups)
            topics = [*spec.sources, self.settings.topology.room_topic(side)]
            wanted = {(t, p) for t in topics if t in meta for p in meta[t].partitions}
            while True:
                dead = self.fleet.crashed()
                if dead:
                    raise RuntimeError(
                        f"{dead[0].name} exited with {dead[0].popen.returncode}:\n{dead[0].tail()}"
                    )
                members, assigned = self.membership(spec.group_id)
                running = len(self.fleet.running(f"{side}-unit"))
                if assigned >= wanted and members >= min(running, len(wanted)):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{side} units did not take all {len(wanted)} partitions in {timeout}s"
                    )
                time.sleep(0.2)

    def membership(self, group: str) -> tuple[int, set[tuple[str, int]]]:
        """(members holding partitions, partitions assigned) of a consumer group now."""
        try:
            desc = self._admin.describe_consumer_groups([group])[group].result(timeout=10)
        except Exception:
            return 0, set()
        holding = [m for m in desc.members if m.assignment.topic_partitions]
        return len(holding), {
            (tp.topic, tp.partition) for m in holding for tp in m.assignment.topic_partitions
        }

    def stop(self, timeout: float = 30.0) -> dict[str, int]:
        if not self.exit_codes:
            self.exit_codes = self.fleet.stop_all(timeout)
            self.stopped_at = time.monotonic()
        return self.exit_codes

    def cleanup(self, keep: Collection[str] = ()) -> None:
        """Delete the run's topics (but those in `keep`) and tables."""
        client = redis_client(self.settings.redis)
        sides: tuple[Side, ...] = ("send", "receive")
        for side in sides:
            for cell in all_cells(self.settings):  # each cell's (router.topology.cells)
                table_for(self.settings, side, client, cell).drop()
        names = [s.name for s in plan(self.settings) if s.name not in keep]
        for future in self._admin.delete_topics(names, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception as exc:
                log.warning("could not delete a topic of %s: %s", self.name, exc)

    # ------------------------------------------------------------------ observing

    def table_stats(self) -> dict[Side, dict[str, int]]:
        client = redis_client(self.settings.redis)
        out: dict[Side, dict[str, int]] = {}
        for side in ("send", "receive"):
            stats = out[side] = {}
            for cell in all_cells(self.settings):  # summed over the cells' tables
                for name, n in table_for(self.settings, side, client, cell).stats().items():
                    stats[name] = stats.get(name, 0) + n
        return out

    def shared(self) -> dict[str, int]:
        """Busy destinations shared, per side: the tables' own counters, to explain a
        verdict (never part of one)."""
        return {side: stats.get("shared", 0) for side, stats in self.table_stats().items()}

    def remembered(self) -> dict[str, int]:
        """Members the units decided from their memory of their groups, per side: the
        tables' own counters, to explain (never part of a verdict)."""
        return {side: stats.get("remembered", 0) for side, stats in self.table_stats().items()}

    def unit_metrics(self) -> dict[str, dict[str, int]]:
        """Counters summed per role over every process that published them."""
        client = redis_client(self.settings.redis)
        totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for name, counters in read_all(
            client, self.settings.redis.key_prefix, self.settings.topology.name
        ).items():
            role = name.split(":", 1)[0]
            for key, value in counters.items():
                totals[role][key] += value
        return {role: dict(c) for role, c in totals.items()}
