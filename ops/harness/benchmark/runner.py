"""The benchmark (`make bench`): what routing costs against a raw Kafka relay, in Python
and in Java, measured side by side in one run on one stack.

Stages, each real processes draining a topic filled beforehand:

* raw relay (`router relay`): a unit with the routing taken out, same Kafka code and
  settings (router/unit/relay.py) - the ceiling for a Python Kafka hop on this machine;
* Java relay (ops/java/Relay.java): the same exactly-once hop with Kafka's own Java client,
  what a plain Java consume -> produce service does (ops/harness/benchmark/javarelay.py);
* send unit, receive unit: one unit alone;
* whole path: a send unit and a receive unit chained (send queue -> transfer topic ->
  receive queues), against two chained raw relays and two chained Java relays;
* the send unit against the raw relay on a three-broker cluster (ops/harness/benchmark/ha.py).

Throughput is read off the consumer group's committed offsets (the transactions'
outcome, the same for every stage): from the first commit to the last, polled every
`POLL_S` (ops/harness/benchmark/measure.py). CPU seconds come from /proc/<pid>/stat of the
stage's processes over the same window (librdkafka's and the JVM's threads included);
Redis round trips from the units' own counters, Redis's own CPU from INFO commandstats
and INFO cpu around each unit run. Latency (ops/harness/benchmark/latency.py) is measured end
to end at fixed offered loads. The headline workloads run as side-by-side rounds.

The parts `Bench` runs (`plan`, `latency`, `trace`, `ha`) see it as
`ops.harness.benchmark.context.Benching`.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.benchmark import javarelay, latency, phases, plan
from ops.harness.benchmark.load import fill
from ops.harness.benchmark.measure import (
    GroupWatch,
    SteadyRedis,
    high_watermarks,
    measure,
    redis_snapshot,
)
from ops.harness.benchmark.model import (
    HA_SUFFIX,
    JAVA_CHAINED,
    JAVA_RELAY,
    PATH,
    PY_CHAINED,
    PY_RELAY,
    RECEIVE,
    RECEIVE_QUEUES,
    SEND,
    SOURCE_PARTITIONS,
    TRACING_OFF,
    TRACING_ON,
    TRANSFER_PARTITIONS,
    BenchSpec,
    Latency,
    Results,
    Throughput,
    Workload,
)
from ops.harness.console import Console, ProgressTask
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from router.backends.kafka import clients
from router.backends.kafka.offsets import CommittedOffsets
from router.backends.redis.client import redis_client
from router.config import RouterSettings
from router.table.store.management import Side
from router.topology.side import side_spec
from router.topology.topics import ensure_topics
from router.unit.relay import relay_spec

log = logging.getLogger("router.bench")

# stage (without HA_SUFFIX) -> (kind: unit, relay or java; side, or "path" for both)
STAGES: dict[str, tuple[str, str]] = {
    PY_RELAY: ("relay", "send"),
    "raw relay (receive side)": ("relay", "receive"),
    JAVA_RELAY: ("java", "send"),
    SEND: ("unit", "send"),
    RECEIVE: ("unit", "receive"),
    PATH: ("unit", "path"),
    PY_CHAINED: ("relay", "path"),
    JAVA_CHAINED: ("java", "path"),
}


class Bench:
    def __init__(
        self,
        base: RouterSettings,
        spec: BenchSpec,
        run_dir: Path,
        out: Console | Callable[[str], None] | None = None,
        results: Results | None = None,
        parent: Bench | None = None,
    ) -> None:
        self.base = base
        self.spec = spec
        self.run_dir = run_dir
        self.console = Console() if out is None else Console.of(out)
        self.out = self.console.say
        self.suffix = ""  # appended to every stage name (HA_SUFFIX on the cluster)
        self.partitions = SOURCE_PARTITIONS  # of each filled topic (the stages' sources)
        self.receive_queues = RECEIVE_QUEUES  # of each stage's topology
        self.parent = parent  # whose progress this one's steps count in
        self.id = f"bench-{secrets.token_hex(3)}"
        self.admin = AdminClient(clients.admin_config(base.kafka))
        # Not `stable`: with transactions always pending, a stable read would wait for a
        # gap between them and start the clock late.
        self.offsets = CommittedOffsets(base.kafka, self.id, stable=False)
        self.redis = redis_client(base.redis)
        self.results = results or Results(
            spec, batch_size=base.unit.batch_size, max_batch_size=base.unit.max_batch_size
        )
        self.filled: dict[Workload, tuple[str, int]] = {}
        self.java_classes: Path | None = None
        self.steps = 0
        self.started = time.monotonic()
        self.total_steps = 0
        self.bar: ProgressTask | None = None  # the steps' bar while `run` runs

    def on_servers(self, base: RouterSettings, suffix: str) -> Bench:
        """The same run on other servers (`base`): its stages named with `suffix`, its
        results and progress this run's (the three-broker row: `ops.harness.benchmark.ha`)."""
        other = Bench(
            base, self.spec, self.run_dir, self.console, results=self.results, parent=self
        )
        other.suffix = suffix
        return other

    def progress(self, text: str) -> None:
        if self.parent is not None:
            self.parent.progress(text)
            return
        self.steps += 1
        elapsed = time.monotonic() - self.started
        self.out(f"[{self.steps:>3}/{self.total_steps} {elapsed:6.0f}s] {text}")
        if self.bar is not None:
            self.bar.update(self.steps)

    # -------------------------------------------------------------- filling

    def fill_all(
        self, workloads: list[Workload] | None = None, counts: dict[Workload, int] | None = None
    ) -> None:
        """Fill a topic per workload: `counts`' number of messages, else the spec's."""
        workloads = self.spec.workloads() if workloads is None else workloads
        names = {w: f"{self.id}.in.{w.slug}" for w in workloads}
        futures = self.admin.create_topics(
            [
                NewTopic(n, self.partitions, self.base.kafka.replication_factor or -1)
                for n in names.values()
            ],
            operation_timeout=60,
        )
        for f in futures.values():
            f.result(timeout=60)
        for w, topic in names.items():
            count = (counts or {}).get(w) or self.spec.messages_for(w)
            t0 = time.monotonic()
            fill(self.base, topic, w, count, self.spec.seed, self.partitions)
            self.filled[w] = (topic, count)
            self.progress(
                f"filled {topic}: {count:,} messages of {w.label} ({time.monotonic() - t0:.1f}s)"
            )

    # -------------------------------------------------------------- one run

    def pipeline(
        self,
        tag: str,
        env: dict[str, str],
        metrics: bool = False,
        w: Workload | None = None,
        name: str | None = None,
    ) -> Pipeline:
        """A pipeline for one stage (named `name`, else after the run, `tag` and a random
        suffix): under the default busy policy if the workload keeps fewer groups open than
        a side has destinations (the unsaturated headline, the ratio line's), otherwise under
        `share`."""
        name = name or f"{self.id}.{tag}.{secrets.token_hex(2)}"
        default = RouterSettings().routing.busy_policy
        fits = w is not None and w.open_groups < min(TRANSFER_PARTITIONS, self.receive_queues)
        spec = PipelineSpec(
            send_units=0,
            receive_units=0,
            sweepers=0,
            send_queues=1,
            send_queue_partitions=self.partitions,
            transfer_partitions=TRANSFER_PARTITIONS,
            receive_queues=self.receive_queues,
            default_ttl_ms=600_000,
            # The hop's cost against the relays, as measured since the first bench: with up
            # to 10,000 groups open against 12 destinations, the default policy (wait) would
            # park nearly every group in the room, which is the burst stage's subject
            # (ops/harness/scenarios/burst.py), not these stages'.
            busy_policy=default if fits else "share",
            extra_env=env,
            metrics=metrics,
        )
        return Pipeline(self.base, spec, self.run_dir / name, name=name, keep=True)

    def start(self, p: Pipeline, kind: str, side: Side, processes: int = 1) -> None:
        if kind == "java":
            if self.java_classes is None:
                self.java_classes = javarelay.build()
            javarelay.start(p, side, self.java_classes, processes)
        else:
            p.fleet.start(f"{side}-{kind}", processes)

    def run_stage(
        self,
        stage: str,
        w: Workload,
        processes: int = 1,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> Throughput:
        """One stage draining the workload's filled topic (`env`: more settings of its
        processes, e.g. tracing on; `name`: its topology's, else a fresh one). Redis's own
        cost is read around a unit stage on one Redis; on a Redis Cluster the caller reads
        each node's (ops/harness/benchmark/cluster.py)."""
        topic, count = self.filled[w]
        base = stage.removesuffix(HA_SUFFIX).removesuffix(TRACING_OFF).removesuffix(TRACING_ON)
        kind, side_or_path = STAGES[base]
        stage += self.suffix
        env = dict(env or {})
        if side_or_path == "receive":
            env["ROUTER_TOPOLOGY__TRANSFER_TOPIC"] = topic
            env["ROUTER_TOPOLOGY__RECEIVE_UNITS"] = str(self.partitions)
        else:
            env["ROUTER_TOPOLOGY__SEND_QUEUES"] = json.dumps([topic])
        p = self.pipeline(f"{kind}-{side_or_path}", env, w=w, name=name)
        sides: list[Side] = (
            ["send", "receive"] if side_or_path == "path" else [side_or_path]  # type: ignore[list-item]
        )
        try:
            ensure_topics(p.settings, self.admin)
            watches: list[Any] = []
            for i, side in enumerate(sides):
                s = side_spec(p.settings, side)
                group = (s if kind == "unit" else relay_spec(s)).group_id
                parts = [
                    TopicPartition(t, q)
                    for t in s.sources
                    for q in self.admin.list_topics(t, timeout=30).topics[t].partitions
                ]
                watch = GroupWatch(self.offsets, group, parts)
                if i == 0:
                    # The filled topic (not transactional): its ends are its message counts.
                    watches.append((watch, high_watermarks(p.settings, [topic], self.admin), 0))
                else:
                    # Known once the stage before has finished writing it.
                    sources = list(s.sources)
                    watches.append(
                        (watch, lambda src=sources: high_watermarks(p.settings, src, self.admin), 1)
                    )
            for watch, _, _ in watches:
                watch.committed()  # finds the group's coordinator before the clock starts
            one_redis = kind == "unit" and not self.base.redis.cluster_nodes
            redis_before = redis_snapshot(self.redis) if one_redis else None
            # One side on a workload of open groups: Redis also over the run's steady part.
            steady = (
                SteadyRedis(self.redis, 2 * w.open_groups)
                if one_redis and len(sides) == 1 and w.grouped > 0 and 4 * w.open_groups <= count
                else None
            )
            for side in sides:
                self.start(p, kind, side, processes)
            pids = [x.popen.pid for x in p.fleet.procs]

            def alive() -> str | None:
                dead = [x for x in p.fleet.procs if not x.alive]
                return f"{dead[0].name} exited:\n{dead[0].tail()}" if dead else None

            seconds, messages, cpu = measure(watches, pids, count, 300, alive, steady)
            codes = p.stop()
            redis_used = redis_snapshot(self.redis) - redis_before if redis_before else None
            bad = {n: c for n, c in codes.items() if c != 0}
            if bad:
                raise RuntimeError(f"{stage}: processes did not stop cleanly: {bad}")
            metrics = p.unit_metrics()
            if kind == "java":
                batches, spent = phases.from_java_logs(x.tail(50) for x in p.fleet.procs)
            else:
                batches, spent = phases.from_counters(metrics.get(f"{sides[0]}-{kind}", {}))
        finally:
            p.stop()
            p.cleanup(keep=[topic])
        roles = [f"{side}-unit" for side in sides] if kind == "unit" else []
        t = Throughput(
            stage,
            w,
            processes,
            messages,
            seconds,
            cpu,
            redis_round_trips=sum(metrics.get(r, {}).get("redis_round_trips", 0) for r in roles),
            messages_in=sum(metrics.get(r, {}).get("messages_in", 0) for r in roles),
            batches=batches,
            phases=spent,
        )
        if redis_used is not None:
            t.redis_script_calls = redis_used.script_calls
            t.redis_script_us = redis_used.script_us
            t.redis_cpu_s = redis_used.cpu_s
            t.redis_main_cpu_s = redis_used.main_cpu_s
        if steady is not None and steady.used is not None:
            t.steady_redis_cpu_s = steady.used.cpu_s
            t.steady_redis_messages = steady.messages
        self.results.throughput.append(t)
        extra = ""
        if roles:
            extra = f", {t.round_trips_per_msg:.4f} Redis round trips/msg"
        if redis_used is not None:
            extra += (
                f", Redis {t.redis_script_us_per_msg:.2f} us/msg in scripts, "
                f"{t.redis_cpu_us_per_msg:.2f} us/msg CPU "
                f"({t.redis_main_cpu_us_per_msg:.2f} in its main thread)"
            )
            if t.steady_redis_messages:
                extra += (
                    f"; {t.steady_redis_cpu_us_per_msg:.2f} us/msg CPU once its "
                    f"{w.open_groups:,} groups are open (the last "
                    f"{t.steady_redis_messages:,} messages)"
                )
        if messages < count / 2:
            extra += f" (only {messages:,} of {count:,} inside the window: imprecise)"
        self.progress(
            f"{stage:<25} x{processes} {w.label:<40} {t.msg_s:>9,.0f} msg/s "
            f"{t.mb_s:7.1f} MB/s  {t.cpu_s_per_million:6.1f} CPU s/M{extra}"
        )
        return t

    def run_latency(self, path: str, w: Workload, rate: float) -> Latency:
        return latency.run_latency(self, path, w, rate)

    # -------------------------------------------------------------- the plan

    def run(self, only: Collection[str] = ()) -> Results:
        """The whole plan (ops/harness/benchmark/plan.py), or only the parts named."""
        steps = plan.plan(self, only)
        self.total_steps = sum(weight for weight, _ in steps)
        self.out(f"bench {self.id}: {self.total_steps} steps; results in {self.run_dir}")
        try:
            with self.console.progress(
                "bench steps", max(self.total_steps, 1), unit="step", plain=False
            ) as self.bar:
                for _, action in steps:
                    action()
        finally:
            self.bar = None
            self.cleanup()
        return self.results

    def cleanup(self) -> None:
        topics = [t for t in self.admin.list_topics(timeout=30).topics if t.startswith(self.id)]
        if topics:
            for f in self.admin.delete_topics(topics, operation_timeout=60).values():
                try:
                    f.result(timeout=60)
                except Exception as exc:
                    log.warning("could not delete a bench topic: %s", exc)
