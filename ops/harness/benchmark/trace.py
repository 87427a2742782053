"""Where a message's latency goes (issue 15, item 2), traced from outside the units: a
latency run whose observer also reads the transfer topic (committed), so that each message
yields five instants on one clock (the machine's; the transfer topic and the receive
queues have LogAppendTime, ops/harness/stack/pipeline.py):

    sent -> appended to the transfer topic -> visible there (committed) -> appended to a
    receive queue -> visible there

The first gap is the send hop's poll wait, fetch, routing and produce (and the load
generator's own linger); the second is the rest of its batch and its transaction's commit;
the third the receive hop's fetch, routing and produce; the fourth its commit. The
observer reads with fetch.wait.max.ms=10, so each "visible" is late by up to ~10 ms.
The units also serve their own timings (Prometheus histograms: a batch's routing, a
Redis round trip, a commit), read at the end. Measuring perturbs a little: the observer
reads the transfer topic too, so the trace is its own run, not the latency figures.

    python -m ops.bench --only trace
"""

from __future__ import annotations

import re
import urllib.request

from confluent_kafka import Message

from ops.harness.benchmark.context import Benching
from ops.harness.benchmark.latency import offer_and_collect, wait_assigned
from ops.harness.benchmark.model import JAVA_CHAINED, PATH, SEGMENTS, Trace, Workload
from ops.harness.console import Column, markdown_table
from ops.harness.stats import percentile
from router.table.store.management import Side
from router.topology.side import side_spec
from router.topology.topics import ensure_topics
from router.unit.relay import relay_spec

UNIT_TIMINGS = ("batch_route_seconds", "redis_rtt_seconds", "txn_commit_seconds")


def run_trace(bench: Benching, path: str, w: Workload, rate: float) -> Trace:
    kind = {PATH: "unit", JAVA_CHAINED: "java"}.get(path, "relay")
    p = bench.pipeline(f"trace-{kind}", {}, metrics=True)
    transfer: dict[int, tuple[int, int]] = {}  # sent ns -> (append ns, seen ns)
    receive: dict[int, tuple[int, int]] = {}

    def seen(m: Message, now: int, sent: int) -> None:
        append_ns = m.timestamp()[1] * 1_000_000
        (transfer if m.topic() == p.settings.topology.transfer_topic else receive)[sent] = (
            append_ns,
            now,
        )

    try:
        ensure_topics(p.settings, bench.admin)
        p.use_append_time()  # the broker's clock on the transfer topic and receive queues
        sides: tuple[Side, ...] = ("send", "receive")
        for side in sides:
            bench.start(p, kind, side)
        for side in sides:
            s = side_spec(p.settings, side)
            wait_assigned(bench, p, (s if kind == "unit" else relay_spec(s)).group_id, s.sources)
        offer_and_collect(bench, p, w, rate, [p.settings.topology.transfer_topic], seen)
        timings = {x.role: scrape(x.metrics_port) for x in p.fleet.procs if x.metrics_port}
    finally:
        p.stop()
        p.cleanup()
    gaps: list[list[int]] = [[] for _ in SEGMENTS]
    for sent, (r_append, r_seen) in receive.items():
        if sent not in transfer:
            continue
        t_append, t_seen = transfer[sent]
        steps = (t_append - sent, t_seen - t_append, r_append - t_seen, r_seen - r_append)
        for i, gap in enumerate((*steps, r_seen - sent)):
            gaps[i].append(gap)
    for series in gaps:
        series.sort()
    trace = Trace(
        path,
        rate,
        len(gaps[-1]),
        [percentile(g, 0.5, empty=0.0) / 1e6 for g in gaps],
        [percentile(g, 0.99, empty=0.0) / 1e6 for g in gaps],
    )
    for role, text in timings.items():
        trace.unit_ms[role] = histogram_means(text)
        commits = counter(text, "txn_commits")
        if commits:
            trace.batch[role] = counter(text, "messages_in") / commits
    bench.progress(
        f"trace {path:<20} at {rate:,.0f} msg/s: "
        + ", ".join(f"{s} {a:.1f}" for s, a in zip(SEGMENTS, trace.p50_ms, strict=True))
        + f" ms (p50, {trace.messages:,} messages)"
    )
    return trace


def scrape(port: int | None) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def histogram_means(text: str) -> dict[str, tuple[float, int]]:
    """Mean (ms) and count of each unit timing in a Prometheus text exposition."""
    out = {}
    for name in UNIT_TIMINGS:
        total = re.search(rf"^router_{name}_sum{{[^}}]*}} (\S+)$", text, re.M)
        count = re.search(rf"^router_{name}_count{{[^}}]*}} (\S+)$", text, re.M)
        if total and count and float(count.group(1)):
            n = float(count.group(1))
            out[name] = (float(total.group(1)) / n * 1000, int(n))
    return out


def counter(text: str, name: str) -> float:
    found = re.search(rf"^router_{name}_total{{[^}}]*}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def trace_table(traces: list[Trace]) -> str:
    columns = [Column("path"), Column("msg/s", "right")]
    columns += [Column(f"{s} p50/p99 (ms)", "right") for s in SEGMENTS]
    rows = [
        [t.path, f"{t.rate:,.0f}"]
        + [f"{a:.1f} / {b:.1f}" for a, b in zip(t.p50_ms, t.p99_ms, strict=True)]
        for t in traces
    ]
    lines = markdown_table(columns, rows)
    for t in traces:
        for role, timings in t.unit_ms.items():
            parts = [
                f"{n.removesuffix('_seconds')} {m:.1f} ms x{c}" for n, (m, c) in timings.items()
            ]
            batch = f", {t.batch[role]:.0f} messages per commit" if role in t.batch else ""
            lines.append(f"- {t.path} at {t.rate:,.0f} msg/s, {role}: {', '.join(parts)}{batch}")
    return "\n".join(lines)
