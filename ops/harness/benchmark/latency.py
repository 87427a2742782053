"""End-to-end latency of a path (whole path, two chained raw relays, two chained Java
relays) at a fixed offered load: a paced load generator (its own process) writes its
clock into each payload; a `read_committed` consumer of the receive queues subtracts it.
Messages sent in the first `latency_warmup_s` are not counted."""

from __future__ import annotations

import multiprocessing
import struct
import time
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, Message

from ops.harness.benchmark.context import Benching
from ops.harness.benchmark.load import offer_load
from ops.harness.benchmark.model import JAVA_CHAINED, PATH, Latency, Workload
from ops.harness.stack.pipeline import Pipeline
from ops.harness.stats import percentile
from router.backends.kafka import clients
from router.table.store.management import Side
from router.topology.side import side_spec
from router.topology.topics import ensure_topics
from router.unit.relay import relay_spec


def run_latency(bench: Benching, path: str, w: Workload, rate: float) -> Latency:
    kind = {PATH: "unit", JAVA_CHAINED: "java"}.get(path, "relay")
    p = bench.pipeline(f"lat-{kind}", {})
    try:
        ensure_topics(p.settings, bench.admin)
        sides: tuple[Side, ...] = ("send", "receive")
        for side in sides:
            bench.start(p, kind, side)
        for side in sides:
            s = side_spec(p.settings, side)
            group = (s if kind == "unit" else relay_spec(s)).group_id
            wait_assigned(bench, p, group, s.sources)
        latencies = offer_and_collect(bench, p, w, rate)
    finally:
        p.stop()
        p.cleanup()
    latencies.sort()
    lat = Latency(
        path,
        rate,
        len(latencies),
        percentile(latencies, 0.50, empty=0.0) / 1e6,
        percentile(latencies, 0.99, empty=0.0) / 1e6,
        percentile(latencies, 0.999, empty=0.0) / 1e6,
    )
    bench.results.latency.append(lat)
    bench.progress(
        f"latency {path:<20} at {rate:,.0f} msg/s: p50 {lat.p50_ms:.1f} ms, "
        f"p99 {lat.p99_ms:.1f} ms, p99.9 {lat.p999_ms:.1f} ms ({lat.count:,} messages)"
    )
    return lat


def wait_assigned(bench: Benching, p: Pipeline, group: str, topics: Sequence[str]) -> None:
    meta = bench.admin.list_topics(timeout=30).topics
    wanted = {(t, q) for t in topics for q in meta[t].partitions}
    deadline = time.monotonic() + 90
    while p.membership(group)[1] < wanted:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{group} did not take its partitions in 90s")
        dead = [x for x in p.fleet.procs if not x.alive]
        if dead:
            raise RuntimeError(f"{dead[0].name} exited:\n{dead[0].tail()}")
        time.sleep(0.2)


def offer_and_collect(
    bench: Benching,
    p: Pipeline,
    w: Workload,
    rate: float,
    also: Sequence[str] = (),
    seen: Callable[[Message, int, int], None] | None = None,
) -> list[int]:
    """Offer `rate` msg/s for `latency_seconds`; each counted message's latency in ns.
    `also`: more topics to read (committed) beside the receive queues, each of their
    messages and every receive queue's handed to `seen(message, now_ns, sent_ns)`."""
    settings = p.settings
    spec = bench.spec
    queues = set(settings.topology.receive_queues)
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
    consumer.subscribe([*settings.topology.receive_queues, *also])
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
            spec.latency_seconds,
            spec.seed,
            sent,
        ),
        daemon=True,
    )
    gen.start()
    latencies: list[int] = []
    received = 0
    warmup_ns = int(spec.latency_warmup_s * 1e9)
    first_ns = 0
    deadline = time.monotonic() + spec.latency_seconds + 120
    try:
        while True:
            # poll, then whatever else is fetched: consume(n, timeout) would wait out its
            # whole timeout for n messages, and every message received in it would count
            # the wait as latency (50 ms at the median with 0.1 s, before 2026-11-24).
            first = consumer.poll(0.1)
            for m in [first, *consumer.consume(1000, 0)] if first is not None else []:
                if m.error() is not None:
                    continue
                now = time.time_ns()
                sent_ns = struct.unpack_from(">q", m.value())[0]
                if seen is not None and sent_ns - first_ns >= warmup_ns:
                    seen(m, now, sent_ns)
                if m.topic() not in queues:
                    continue
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
