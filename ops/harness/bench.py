"""The benchmark (`make bench`): what routing costs against a raw Kafka relay, measured
side by side in one run on one stack.

Stages, each a real process started from the `router` command:

* raw relay (`router relay`): a unit with the routing taken out, same Kafka code and
  settings (router/relay.py) - the ceiling for a Python Kafka hop on this machine;
* send unit, receive unit: one unit alone, draining a topic filled beforehand;
* whole path: a send unit and a receive unit chained (send queue -> transfer topic ->
  receive queues), against two chained raw relays.

Throughput is read off the consumer group's committed offsets (the transactions'
outcome, the same for every stage): from the first commit to the last, polled every
`POLL_S`. CPU seconds come from /proc/<pid>/stat of the stage's processes over the same
window (librdkafka's threads included); Redis round trips from the units' own counters.
Latency is measured end to end at a fixed offered load (half the whole path's maximum):
the load generator (its own process) writes its clock into each payload, a
`read_committed` consumer of the receive queues subtracts it.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import secrets
import struct
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.console import Column, Console, ProgressTask, markdown_table
from ops.harness.pipeline import Pipeline, PipelineSpec
from router import clients, contract
from router.config import RouterSettings
from router.offsets import CommittedOffsets
from router.relay import relay_spec
from router.side import side_spec
from router.table import Side
from router.topics import ensure_topics

log = logging.getLogger("router.bench")

SIZES = (100, 1_000, 10_000)
GROUPED = (0.0, 0.5, 1.0)
OPEN_GROUPS = (10, 10_000)
SOURCE_PARTITIONS = 4
TRANSFER_PARTITIONS = 12
RECEIVE_QUEUES = 16
MEAN_GROUP_LENGTH = 20
POLL_S = 0.02
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Workload:
    size: int  # payload bytes
    grouped: float  # share of messages that belong to a group
    open_groups: int  # groups open at once

    @property
    def label(self) -> str:
        size = f"{self.size // 1000} KB" if self.size >= 1000 else f"{self.size} B"
        return f"{size}, {self.grouped:.0%} grouped, {self.open_groups:,} open groups"

    @property
    def slug(self) -> str:
        return f"{self.size}b-{int(self.grouped * 100)}pct-{self.open_groups}g"


KEY = Workload(1_000, 0.5, 10_000)  # the ratio line's workload


@dataclass(frozen=True)
class BenchSpec:
    # Messages per filled topic: about this many bytes of payload, within [min, max].
    # Enough for a few seconds of every stage (the window is read every POLL_S).
    bytes_per_run: int = 100_000_000
    min_messages: int = 10_000
    max_messages: int = 150_000
    repeats: int = 5  # side-by-side repetitions of the key raw/send pair (median)
    latency_seconds: float = 8.0
    latency_warmup_s: float = 1.5
    sizes: tuple[int, ...] = SIZES
    grouped: tuple[float, ...] = GROUPED
    open_groups: tuple[int, ...] = OPEN_GROUPS
    seed: int = 7

    def messages(self, size: int) -> int:
        return max(self.min_messages, min(self.max_messages, self.bytes_per_run // size))

    def workloads(self) -> list[Workload]:
        return [
            Workload(s, g, o) for s in self.sizes for g in self.grouped for o in self.open_groups
        ]

    def key(self) -> Workload:
        """The ratio line's workload, or the nearest this (reduced) spec measures."""
        if KEY in self.workloads():
            return KEY
        return min(
            self.workloads(),
            key=lambda w: (abs(w.size - KEY.size), abs(w.grouped - KEY.grouped), -w.open_groups),
        )


@dataclass
class Throughput:
    stage: str
    workload: Workload
    processes: int
    messages: int  # counted between the first and the last commit
    seconds: float
    cpu_s: float
    redis_round_trips: int = 0
    messages_in: int = 0

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_s(self) -> float:
        return self.msg_s * self.workload.size / 1e6

    @property
    def cpu_s_per_million(self) -> float:
        return self.cpu_s / self.messages * 1e6 if self.messages else 0.0

    @property
    def round_trips_per_msg(self) -> float:
        return self.redis_round_trips / self.messages_in if self.messages_in else 0.0


@dataclass
class Latency:
    path: str
    rate: float  # offered, messages/s
    count: int
    p50_ms: float
    p99_ms: float
    p999_ms: float


@dataclass
class Results:
    spec: BenchSpec
    throughput: list[Throughput] = field(default_factory=list)
    latency: list[Latency] = field(default_factory=list)
    key_pairs: list[tuple[float, float]] = field(default_factory=list)  # (raw, send) msg/s
    batch_size: int = 500  # the units' unit.batch_size in this run

    def typical(self, stage: str, w: Workload, processes: int = 1) -> float:
        """The median msg/s of every run of a stage on a workload (0 if none)."""
        runs = [
            t.msg_s
            for t in self.throughput
            if t.stage == stage and t.workload == w and t.processes == processes
        ]
        return median(runs) if runs else 0.0

    def baseline(self, t: Throughput) -> float:
        """What a stage's throughput is compared with: its raw relay, same message size
        (the relay's cost does not depend on grouping), median of its runs."""
        stage = {
            "send unit": "raw relay (send side)",
            "receive unit": "raw relay (receive side)",
            "whole path": "raw relays chained",
        }.get(t.stage)
        if stage is None:
            return 0.0
        return self.typical(stage, t.workload, t.processes) or self.typical(
            stage, Workload(t.workload.size, KEY.grouped, KEY.open_groups), t.processes
        )

    def find(self, stage: str, w: Workload, processes: int = 1) -> Throughput | None:
        for t in self.throughput:
            if t.stage == stage and t.workload == w and t.processes == processes:
                return t
        return None

    @property
    def ratio(self) -> float:
        """Send unit / raw relay at the key workload: the median of side-by-side pairs."""
        return median(send / raw for raw, send in self.key_pairs) if self.key_pairs else 0.0


# -------------------------------------------------------------------------- the workload


class GroupModel:
    """Which group each message belongs to: `open_groups` slots, each holding one open
    group at a time (a new one as soon as the last ended), group lengths around
    MEAN_GROUP_LENGTH; `grouped` of the messages belong to a group, the rest are
    ordinary. Deterministic for a seed."""

    def __init__(self, w: Workload, seed: int, prefix: str) -> None:
        self.w = w
        self.rng = random.Random(seed)
        self.prefix = prefix
        self.counter = 0
        self.slots: list[list[Any]] = [self._new() for _ in range(w.open_groups)]

    def _new(self) -> list[Any]:
        self.counter += 1
        length = self.rng.randint(MEAN_GROUP_LENGTH // 2, MEAN_GROUP_LENGTH * 3 // 2)
        return [f"{self.prefix}-g{self.counter}", 0, length]

    def next(self) -> tuple[str | None, bool, int]:
        """(guarantee ID or None, final, sequence number)."""
        if self.rng.random() >= self.w.grouped:
            return None, False, 0
        i = self.rng.randrange(len(self.slots))
        gid, seq, length = self.slots[i]
        final = seq == length - 1
        if final:
            self.slots[i] = self._new()
        else:
            self.slots[i][1] = seq + 1
        return gid, final, seq


def payloads(size: int, seed: int) -> list[bytes]:
    """Random payloads, distinct across more than lz4's 64 KB window: nothing for the
    compression to squeeze, so the figures are those of incompressible payloads (real
    ones usually compress), without paying for new random bytes per message."""
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(max(16, 256_000 // max(size, 1)))]


def _partition(gid: str | None, index: int, partitions: int) -> int:
    return zlib.crc32(gid.encode()) % partitions if gid else index % partitions


def fill(
    settings: RouterSettings,
    topic: str,
    w: Workload,
    count: int,
    seed: int,
) -> None:
    """Write `count` messages of the workload to `topic` (idempotent, not transactional:
    its offsets are its messages)."""
    producer = Producer(
        {
            **clients.idempotent_producer_config(settings.kafka, f"bench-fill-{topic}"),
            "linger.ms": 50,
            "batch.size": 1_000_000,
        }
    )
    pool = payloads(w.size, seed)
    model = GroupModel(w, seed, topic)
    for i in range(count):
        gid, final, seq = model.next()
        headers = contract.headers_for(gid, final=final, seq=seq if gid else None)
        payload = pool[i % len(pool)]
        while True:
            try:
                producer.produce(
                    topic,
                    payload,
                    gid.encode() if gid else None,
                    partition=_partition(gid, i, SOURCE_PARTITIONS),
                    headers=headers,
                )
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"filling {topic}: {left} messages not acknowledged")


# -------------------------------------------------------------------------- measuring


def cpu_seconds(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / CLK_TCK


class GroupWatch:
    """A consumer group's committed offsets over a set of partitions."""

    def __init__(
        self, reader: CommittedOffsets, group: str, partitions: list[TopicPartition]
    ) -> None:
        self.reader = reader
        self.group = group
        self.partitions = partitions

    def committed(self) -> dict[tuple[str, int], int]:
        try:
            return self.reader.read(self.group, self.partitions, timeout=10)
        except KafkaException as exc:
            log.debug("offsets of %s not readable yet: %s", self.group, exc)
            return {}


def high_watermarks(
    settings: RouterSettings, topics: Sequence[str], admin: AdminClient
) -> dict[tuple[str, int], int]:
    meta = admin.list_topics(timeout=30).topics
    consumer = Consumer({**clients.admin_config(settings.kafka), "group.id": "bench-watermarks"})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
            for t in topics
            for p in meta[t].partitions
        }
    finally:
        consumer.close()


def _done(
    committed: dict[tuple[str, int], int], ends: dict[tuple[str, int], int], slack: int
) -> bool:
    """Every partition committed up to its end. A transactional input ends with a commit
    marker after its last record, which no consumer commits past: `slack` = 1."""
    return all(committed.get(tp, 0) >= end - slack for tp, end in ends.items() if end > 0)


@dataclass
class _Window:
    started: float = 0.0
    at_start: int = 0
    cpu_start: float = 0.0


def measure(
    watches: list[
        tuple[
            GroupWatch, dict[tuple[str, int], int] | Callable[[], dict[tuple[str, int], int]], int
        ]
    ],
    pids: Sequence[int],
    total: int,
    timeout: float,
    alive: Callable[[], str | None],
) -> tuple[float, int, float]:
    """Wait until every watched group has committed its input; returns (seconds,
    messages, cpu seconds) from the first commit of the first group to the last commit
    of the last one. Each watch is (group, end offsets or a function giving them once
    the previous group is done, slack)."""
    window = _Window()
    deadline = time.monotonic() + timeout
    for i, (watch, ends_or_fn, slack) in enumerate(watches):
        ends = ends_or_fn() if callable(ends_or_fn) else ends_or_fn
        while True:
            now = time.monotonic()
            committed = watch.committed()
            if i == 0 and not window.started and any(committed.values()):
                window = _Window(now, sum(committed.values()), cpu_seconds(pids))
            if window.started and _done(committed, ends, slack):
                break
            dead = alive()
            if dead:
                raise RuntimeError(dead)
            if now > deadline:
                raise TimeoutError(
                    f"{watch.group} committed {sum(committed.values())} of "
                    f"{sum(ends.values())} in {timeout:.0f}s"
                )
            time.sleep(POLL_S)
    seconds = time.monotonic() - window.started
    return seconds, total - window.at_start, cpu_seconds(pids) - window.cpu_start


# -------------------------------------------------------------------------- the driver


class Bench:
    def __init__(
        self,
        base: RouterSettings,
        spec: BenchSpec,
        run_dir: Path,
        out: Console | Callable[[str], None] | None = None,
    ) -> None:
        self.base = base
        self.spec = spec
        self.run_dir = run_dir
        self.console = Console() if out is None else Console.of(out)
        self.out = self.console.say
        self.id = f"bench-{secrets.token_hex(3)}"
        self.admin = AdminClient(clients.admin_config(base.kafka))
        # Not `stable`: with transactions always pending, a stable read would wait for a
        # gap between them and start the clock late.
        self.offsets = CommittedOffsets(base.kafka, self.id, stable=False)
        self.results = Results(spec, batch_size=base.unit.batch_size)
        self.filled: dict[Workload, tuple[str, int]] = {}
        self._steps = 0
        self._started = time.monotonic()
        self._total_steps = 0
        self._bar: ProgressTask | None = None  # the steps' bar while `run` runs

    # -------------------------------------------------------------- progress

    def _progress(self, text: str) -> None:
        self._steps += 1
        elapsed = time.monotonic() - self._started
        self.out(f"[{self._steps:>3}/{self._total_steps} {elapsed:6.0f}s] {text}")
        if self._bar is not None:
            self._bar.update(self._steps)

    # -------------------------------------------------------------- filling

    def fill_all(self) -> None:
        names = {w: f"{self.id}.in.{w.slug}" for w in self.spec.workloads()}
        futures = self.admin.create_topics(
            [
                NewTopic(n, SOURCE_PARTITIONS, self.base.kafka.replication_factor or -1)
                for n in names.values()
            ],
            operation_timeout=60,
        )
        for f in futures.values():
            f.result(timeout=60)
        for w, topic in names.items():
            count = self.spec.messages(w.size)
            t0 = time.monotonic()
            fill(self.base, topic, w, count, self.spec.seed)
            self.filled[w] = (topic, count)
            self._progress(
                f"filled {topic}: {count:,} messages of {w.label} ({time.monotonic() - t0:.1f}s)"
            )

    # -------------------------------------------------------------- one run

    def _pipeline(self, tag: str, env: dict[str, str]) -> Pipeline:
        name = f"{self.id}.{tag}.{secrets.token_hex(2)}"
        spec = PipelineSpec(
            send_units=0,
            receive_units=0,
            sweepers=0,
            send_queues=1,
            send_queue_partitions=SOURCE_PARTITIONS,
            transfer_partitions=TRANSFER_PARTITIONS,
            receive_queues=RECEIVE_QUEUES,
            default_ttl_ms=600_000,
            extra_env=env,
        )
        return Pipeline(self.base, spec, self.run_dir / name, name=name, keep=True)

    def run_stage(self, stage: str, w: Workload, processes: int = 1) -> Throughput:
        """One stage draining the workload's filled topic."""
        topic, count = self.filled[w]
        kind, side_or_path = {
            "raw relay (send side)": ("relay", "send"),
            "raw relay (receive side)": ("relay", "receive"),
            "send unit": ("unit", "send"),
            "receive unit": ("unit", "receive"),
            "whole path": ("unit", "path"),
            "raw relays chained": ("relay", "path"),
        }[stage]
        if side_or_path == "receive":
            env = {
                "ROUTER_TOPOLOGY__TRANSFER_TOPIC": topic,
                "ROUTER_TOPOLOGY__RECEIVE_UNITS": str(SOURCE_PARTITIONS),
            }
        else:
            env = {"ROUTER_TOPOLOGY__SEND_QUEUES": json.dumps([topic])}
        p = self._pipeline(f"{kind}-{side_or_path}", env)
        sides: list[Side] = (
            ["send", "receive"] if side_or_path == "path" else [side_or_path]  # type: ignore[list-item]
        )
        try:
            ensure_topics(p.settings, self.admin)
            watches: list[Any] = []
            for i, side in enumerate(sides):
                s = side_spec(p.settings, side)
                group = (relay_spec(s) if kind == "relay" else s).group_id
                parts = [
                    TopicPartition(t, q)
                    for t in s.sources
                    for q in self.admin.list_topics(t, timeout=30).topics[t].partitions
                ]
                watch = GroupWatch(self.offsets, group, parts)
                if i == 0:
                    # The filled topic (not transactional): its ends are its message counts.
                    ends0 = high_watermarks(p.settings, [topic], self.admin)
                    watches.append((watch, ends0, 0))
                else:
                    # Known once the stage before has finished writing it.
                    sources = list(s.sources)
                    watches.append(
                        (
                            watch,
                            lambda sources=sources: high_watermarks(
                                p.settings, sources, self.admin
                            ),
                            1,
                        )
                    )
            for watch, _, _ in watches:
                watch.committed()  # finds the group's coordinator before the clock starts
            for side in sides:
                p.fleet.start(f"{side}-{kind}", processes)
            pids = [x.popen.pid for x in p.fleet.procs]

            def alive() -> str | None:
                dead = [x for x in p.fleet.procs if not x.alive]
                return f"{dead[0].name} exited:\n{dead[0].tail()}" if dead else None

            seconds, messages, cpu = measure(watches, pids, count, 300, alive)
            codes = p.stop()
            bad = {n: c for n, c in codes.items() if c != 0}
            if bad:
                raise RuntimeError(f"{stage}: processes did not stop cleanly: {bad}")
            metrics = p.unit_metrics()
        finally:
            p.stop()
            p.cleanup(keep=[topic])
        unit_roles = [f"{side}-unit" for side in sides] if kind == "unit" else []
        t = Throughput(
            stage,
            w,
            processes,
            messages,
            seconds,
            cpu,
            redis_round_trips=sum(
                metrics.get(r, {}).get("redis_round_trips", 0) for r in unit_roles
            ),
            messages_in=sum(metrics.get(r, {}).get("messages_in", 0) for r in unit_roles),
        )
        self.results.throughput.append(t)
        extra = f", {t.round_trips_per_msg:.4f} Redis round trips/msg" if unit_roles else ""
        if messages < count / 2:
            extra += f" (only {messages:,} of {count:,} inside the window: imprecise)"
        self._progress(
            f"{stage:<25} x{processes} {w.label:<40} {t.msg_s:>9,.0f} msg/s "
            f"{t.mb_s:7.1f} MB/s  {t.cpu_s_per_million:6.1f} CPU s/M{extra}"
        )
        return t

    # -------------------------------------------------------------- latency

    def run_latency(self, path: str, w: Workload, rate: float) -> Latency:
        kind = "unit" if path == "whole path" else "relay"
        p = self._pipeline(f"lat-{kind}", {})
        try:
            ensure_topics(p.settings, self.admin)
            p.fleet.start(f"send-{kind}")
            p.fleet.start(f"receive-{kind}")
            for side in ("send", "receive"):
                s = side_spec(p.settings, side)
                group = (relay_spec(s) if kind == "relay" else s).group_id
                self._wait_assigned(p, group, s.sources)
            latencies = self._offer_and_collect(p, w, rate)
        finally:
            p.stop()
            p.cleanup()
        latencies.sort()

        def pct(q: float) -> float:
            return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e6

        lat = Latency(path, rate, len(latencies), pct(0.50), pct(0.99), pct(0.999))
        self.results.latency.append(lat)
        self._progress(
            f"latency {path:<20} at {rate:,.0f} msg/s: p50 {lat.p50_ms:.1f} ms, "
            f"p99 {lat.p99_ms:.1f} ms, p99.9 {lat.p999_ms:.1f} ms ({lat.count:,} messages)"
        )
        return lat

    def _wait_assigned(self, p: Pipeline, group: str, topics: Sequence[str]) -> None:
        meta = self.admin.list_topics(timeout=30).topics
        wanted = {(t, q) for t in topics for q in meta[t].partitions}
        deadline = time.monotonic() + 90
        while p.membership(group)[1] < wanted:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{group} did not take its partitions in 90s")
            crashed = p.fleet.crashed()
            if crashed:
                raise RuntimeError(f"{crashed[0].name} exited:\n{crashed[0].tail()}")
            time.sleep(0.2)

    def _offer_and_collect(self, p: Pipeline, w: Workload, rate: float) -> list[int]:
        settings = p.settings
        consumer = Consumer(
            {
                **clients.admin_config(settings.kafka),
                "group.id": f"{p.name}.latency",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        consumer.subscribe(list(settings.topology.receive_queues))
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            consumer.poll(0.1)
            if time.monotonic() > deadline:
                raise TimeoutError("latency consumer got no assignment")
        ctx = multiprocessing.get_context("spawn")
        sent = ctx.Value("q", -1)
        gen = ctx.Process(
            target=offer_load,
            args=(
                clients.idempotent_producer_config(settings.kafka, f"{p.name}-load"),
                settings.topology.send_queues[0],
                w,
                rate,
                self.spec.latency_seconds,
                self.spec.seed,
                sent,
            ),
            daemon=True,
        )
        gen.start()
        latencies: list[int] = []
        received = 0
        warmup_ns = int(self.spec.latency_warmup_s * 1e9)
        first_ns = 0
        deadline = time.monotonic() + self.spec.latency_seconds + 120
        try:
            while True:
                for m in consumer.consume(1000, 0.1):
                    if m.error() is not None:
                        continue
                    now = time.time_ns()
                    sent_ns = struct.unpack_from(">q", m.value())[0]
                    if not first_ns:
                        first_ns = sent_ns
                    received += 1
                    if sent_ns - first_ns >= warmup_ns:
                        latencies.append(now - sent_ns)
                total = sent.value
                if total >= 0 and received >= total:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"latency run: received {received} of {total}")
                if total < 0 and not gen.is_alive():
                    raise RuntimeError(f"the load generator died (exit {gen.exitcode})")
        finally:
            gen.join(10)
            consumer.close()
        return latencies

    # -------------------------------------------------------------- the plan

    def run(self) -> Results:
        spec = self.spec
        workloads = spec.workloads()
        key = spec.key()
        size_key = [Workload(s, key.grouped, key.open_groups) for s in spec.sizes]
        self._total_steps = (
            len(workloads)  # fills
            + 2  # warm-up
            + 2 * len(size_key)  # raw relays
            + 2 * len(workloads)  # send and receive units
            + 2 * (spec.repeats - 1)  # more key pairs
            + 2 * len(size_key)  # whole path and chained relays
            + 2  # scaling
            + 2  # latency
        )
        self.out(
            f"bench {self.id}: {len(workloads)} workloads, {self._total_steps} steps; "
            f"results in {self.run_dir}"
        )
        try:
            with self.console.progress(
                "bench steps", self._total_steps, unit="step", plain=False
            ) as self._bar:
                self.fill_all()
                # A first run warms the broker, the page cache and the JVM; it is not reported.
                self.run_stage("raw relay (send side)", key)
                self.run_stage("send unit", key)
                del self.results.throughput[:]
                for w in size_key:
                    self.run_stage("raw relay (send side)", w)
                    self.run_stage("raw relay (receive side)", w)
                for w in workloads:
                    self.run_stage("send unit", w)
                    self.run_stage("receive unit", w)
                raw, send = (
                    self.results.find("raw relay (send side)", key),
                    self.results.find("send unit", key),
                )
                assert raw and send
                self.results.key_pairs.append((raw.msg_s, send.msg_s))
                for _ in range(spec.repeats - 1):
                    raw = self.run_stage("raw relay (send side)", key)
                    send = self.run_stage("send unit", key)
                    self.results.key_pairs.append((raw.msg_s, send.msg_s))
                for w in size_key:
                    self.run_stage("raw relays chained", w)
                    self.run_stage("whole path", w)
                self.run_stage("raw relay (send side)", key, processes=2)
                self.run_stage("send unit", key, processes=2)
                path = self.results.find("whole path", key)
                assert path is not None
                rate = round(path.msg_s / 2, -1)
                self.run_latency("raw relays chained", key, rate)
                self.run_latency("whole path", key, rate)
        finally:
            self._bar = None
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


def offer_load(
    config: dict[str, Any],
    topic: str,
    w: Workload,
    rate: float,
    seconds: float,
    seed: int,
    sent: Any,
) -> None:
    """The load generator (a process of its own): `rate` messages/s for `seconds`, each
    payload starting with the send time (ns since the epoch, big-endian)."""
    config = {k: v for k, v in config.items() if k != "logger"}
    producer = Producer(config)
    model = GroupModel(w, seed, f"{topic}-lat")
    pool = [p[8:] for p in payloads(max(w.size, 8), seed)]
    count = 0
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= seconds:
            break
        due = int(elapsed * rate) - count
        for _ in range(due):
            gid, final, seq = model.next()
            producer.produce(
                topic,
                struct.pack(">q", time.time_ns()) + pool[count % len(pool)],
                gid.encode() if gid else None,
                partition=_partition(gid, count, SOURCE_PARTITIONS),
                headers=contract.headers_for(gid, final=final, seq=seq if gid else None),
            )
            count += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(60)
    sent.value = count


# -------------------------------------------------------------------------- reporting


THROUGHPUT_COLUMNS = (
    Column("stage"),
    Column("processes", "right"),
    Column("workload"),
    Column("msg/s", "right"),
    Column("MB/s", "right"),
    Column("CPU s per 1M msgs", "right"),
    Column("Redis round trips/msg", "right"),
    Column("vs raw relay", "right"),
)
LATENCY_COLUMNS = (
    Column("path"),
    Column("offered load (msg/s)", "right"),
    Column("messages", "right"),
    Column("p50 (ms)", "right"),
    Column("p99 (ms)", "right"),
    Column("p99.9 (ms)", "right"),
)


def throughput_rows(results: Results) -> list[list[str]]:
    rows = []
    for t in results.throughput:
        ref = results.baseline(t)
        vs = f"{t.msg_s / ref:.2f}" if ref else ""
        rt = f"{t.round_trips_per_msg:.4f}" if t.messages_in else ""
        rows.append(
            [
                t.stage,
                f"{t.processes}",
                t.workload.label,
                f"{t.msg_s:,.0f}",
                f"{t.mb_s:.1f}",
                f"{t.cpu_s_per_million:.1f}",
                rt,
                vs,
            ]
        )
    return rows


def latency_rows(results: Results) -> list[list[str]]:
    return [
        [
            lat.path,
            f"{lat.rate:,.0f}",
            f"{lat.count:,}",
            f"{lat.p50_ms:.1f}",
            f"{lat.p99_ms:.1f}",
            f"{lat.p999_ms:.1f}",
        ]
        for lat in results.latency
    ]


def table(results: Results) -> str:
    return "\n".join(markdown_table(THROUGHPUT_COLUMNS, throughput_rows(results)))


def latency_table(results: Results) -> str:
    return "\n".join(markdown_table(LATENCY_COLUMNS, latency_rows(results)))


def summary(results: Results) -> list[str]:
    """The headline figures against the targets."""
    key = results.spec.key()
    out = []
    send = results.find("send unit", key)
    if send:
        out.append(
            f"send unit / raw relay at {key.label}: {results.ratio:.2f} "
            f"(median of {len(results.key_pairs)} side-by-side pairs; target >= 0.80)"
        )
        out.append(
            f"Redis round trips per message (send unit, batch size "
            f"{results.batch_size}): {send.round_trips_per_msg:.4f} (target <= 0.02)"
        )
    lat = {x.path: x for x in results.latency}
    if "whole path" in lat and "raw relays chained" in lat:
        a, b = lat["whole path"], lat["raw relays chained"]
        out.append(
            f"whole-path p99 / chained raw relays p99: {a.p99_ms / b.p99_ms:.2f} "
            f"({a.p99_ms:.1f} vs {b.p99_ms:.1f} ms at {a.rate:,.0f} msg/s; target <= 2)"
        )
    for stage in ("raw relay (send side)", "send unit"):
        one, two = results.typical(stage, key, 1), results.typical(stage, key, 2)
        if one and two:
            out.append(
                f"{stage}: 2 processes / 1 = {two / one:.2f} (against the median of the "
                f"1-process runs; target >= 1.7 where the cores allow; this machine has "
                f"{os.cpu_count()} cores, shared with the broker and Redis)"
            )
    return out


def plots(results: Results, out_dir: Path) -> list[Path]:
    # matplotlib comes with the `bench` extra only: the router itself does not need it.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    written = []
    # 1. Routing cost: each unit's throughput against its raw relay, per workload.
    units = [
        t
        for t in results.throughput
        if t.stage in ("send unit", "receive unit") and t.processes == 1
    ]
    labels = list(dict.fromkeys(t.workload.label for t in units))
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.4
    for i, stage in enumerate(("send unit", "receive unit")):
        ys = []
        for label in labels:
            t = next((x for x in units if x.stage == stage and x.workload.label == label), None)
            ref = results.baseline(t) if t else 0.0
            ys.append(t.msg_s / ref if t and ref else 0)
        ax.bar([x + i * width for x in range(len(labels))], ys, width, label=stage)
    ax.axhline(0.8, color="grey", linestyle="--", linewidth=1, label="target 0.8")
    ax.set_xticks(
        [x + width / 2 for x in range(len(labels))], labels, rotation=60, ha="right", fontsize=7
    )
    ax.set_ylabel("throughput / raw relay")
    ax.set_title("What routing costs: unit throughput relative to a raw relay")
    ax.legend()
    fig.tight_layout()
    written.append(out_dir / "routing-cost.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # 2. Throughput by message size (MB/s), every stage at the key grouping.
    key = results.spec.key()
    stages = [
        "raw relay (send side)",
        "send unit",
        "raw relay (receive side)",
        "receive unit",
        "raw relays chained",
        "whole path",
    ]
    fig, ax = plt.subplots(figsize=(9, 5))
    sizes = list(results.spec.sizes)
    for j, stage in enumerate(stages):
        ys = []
        for s in sizes:
            t = results.find(stage, Workload(s, key.grouped, key.open_groups))
            ys.append(t.mb_s if t else 0)
        ax.bar([x + j * 0.13 for x in range(len(sizes))], ys, 0.13, label=stage)
    ax.set_xticks([x + 0.33 for x in range(len(sizes))], [f"{s:,} B" for s in sizes])
    ax.set_ylabel("MB/s")
    ax.set_title(
        f"Throughput by message size ({key.grouped:.0%} grouped, {key.open_groups:,} open groups)"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out_dir / "throughput-by-size.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # 3. Latency percentiles.
    if results.latency:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        names = ["p50", "p99", "p99.9"]
        for j, lat in enumerate(results.latency):
            ax.bar(
                [x + j * 0.4 for x in range(3)],
                [lat.p50_ms, lat.p99_ms, lat.p999_ms],
                0.4,
                label=f"{lat.path} ({lat.rate:,.0f} msg/s)",
            )
        ax.set_xticks([x + 0.2 for x in range(3)], names)
        ax.set_ylabel("end-to-end latency (ms)")
        ax.set_title("Latency at half the whole path's maximum load")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(out_dir / "latency.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    # 4. Scaling.
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for j, stage in enumerate(("raw relay (send side)", "send unit")):
        ys = [(t.msg_s if (t := results.find(stage, key, n)) else 0) for n in (1, 2)]
        ax.bar([x + j * 0.4 for x in range(2)], ys, 0.4, label=stage)
    ax.set_xticks([0.2, 1.2], ["1 process", "2 processes"])
    ax.set_ylabel("msg/s")
    ax.set_title(f"Scaling on {os.cpu_count()} cores ({key.label})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out_dir / "scaling.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def report(results: Results, out_dir: Path) -> str:
    """Write results.md, results.json and the plots; return the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = "\n\n".join(
        [
            "# Benchmark results",
            f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
            "Kafka and Redis on the same machine (`make stack-up`).",
            "## Throughput\n\n" + table(results),
            "## Latency\n\n" + latency_table(results),
            "## Against the targets\n\n" + "\n".join(f"- {line}" for line in summary(results)),
        ]
    )
    (out_dir / "results.md").write_text(md + "\n")
    (out_dir / "results.json").write_text(
        json.dumps(
            {
                "throughput": [
                    {**asdict(t), "msg_s": t.msg_s, "mb_s": t.mb_s} for t in results.throughput
                ],
                "latency": [asdict(x) for x in results.latency],
                "key_pairs": results.key_pairs,
                "ratio": results.ratio,
            },
            indent=2,
        )
    )
    plots(results, out_dir)
    return md
