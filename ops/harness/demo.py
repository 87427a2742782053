"""The demo (`make demo`, `python -m ops.demo`): the whole system, end to end, with a verdict.

Creates a fresh topology, starts send units, receive units and a sweeper as separate
processes, sends a realistic mix from several senders (orders of varied sizes mixed with
stock updates), stops the units, reads every destination of both sides to its end with
read_committed once the transaction timeout has passed, and checks: same queue, order,
nothing lost or duplicated, and every interleaving on either side against the capacity
rule (`ops.harness.capacity`). The router's own counters are printed to explain a verdict,
never to excuse one.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ops.harness.collect import Collector, SideRead, read_sides, verdict
from ops.harness.pipeline import Pipeline, PipelineSpec
from ops.harness.verify import Report
from ops.harness.workload import Senders, WorkloadSpec
from router.config import RouterSettings


@dataclass
class DemoResult:
    report: Report
    seconds: float
    shared: dict[str, int]  # busy-destination shares per side (router counters: explanation)
    round_trips_per_message: dict[str, float]
    latencies_ms: list[float]
    exit_codes: dict[str, int]
    sender_failures: list[str]
    undecodable: int
    senders: str = ""  # who sent, for the summary: "4 senders", "the Spark sender"
    extra_violations: list[str] = field(default_factory=list)  # a caller's own checks
    reads: tuple[SideRead, SideRead] | None = None  # what both sides held (send, receive)

    @property
    def violations(self) -> list[str]:
        """Broken guarantees, judged from what the destinations hold (disallowed
        interleavings included), never from the router's counters."""
        out = self.report.violations()
        if self.sender_failures:
            out.append(f"sender failures: {len(self.sender_failures)} ({self.sender_failures[0]})")
        if self.undecodable:
            out.append(f"undecodable records on the destinations: {self.undecodable}")
        bad_exits = {n: c for n, c in self.exit_codes.items() if c != 0}
        if bad_exits:
            out.append(f"processes that did not exit cleanly: {bad_exits}")
        return out + self.extra_violations

    @property
    def ok(self) -> bool:
        return not self.violations


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_pipeline_workload(
    pipeline: Pipeline,
    workload: WorkloadSpec,
    say: Callable[[str], None],
    timeout: float = 600.0,
) -> DemoResult:
    """Send the workload through a started pipeline, collect, stop it, and verify."""
    collector = Collector(pipeline.settings, group_id=f"{pipeline.name}.checker")
    collector.start()
    senders = Senders(pipeline.settings, workload)
    t0 = time.monotonic()
    senders.start()
    last = -math.inf  # the first progress line at once (monotonic may start near 0)
    while not senders.join(timeout=0.5):
        now = time.monotonic()
        if now - last >= 2:
            last = now
            rate = collector.count() / max(now - t0, 1e-9)
            say(
                f"   sent {senders.attempted:>7}/{workload.messages}   received "
                f"{collector.count():>7}   ({rate:,.0f} msg/s)"
            )
        if now - t0 > timeout:
            break
    expected = len(senders.sent)
    say(f"   all sent ({expected} acknowledged); waiting for the receive queues ...")
    collector.wait_for(expected, timeout=max(timeout - (time.monotonic() - t0), 30))
    seconds = time.monotonic() - t0
    collector.stop()
    exit_codes = pipeline.stop()
    assert pipeline.stopped_at is not None
    shared = pipeline.shared()
    metrics = pipeline.unit_metrics()  # published by each unit as it exits
    settings = pipeline.settings
    say(
        "   units stopped; reading both sides to their end once the transaction timeout "
        f"({settings.kafka.transaction_timeout_ms} ms) has passed"
    )
    send, receive = read_sides(settings, pipeline.stopped_at)
    report = verdict(senders.sent, send, receive)
    rtpm = {
        role: m.get("redis_round_trips", 0) / max(m.get("messages_in", 0), 1)
        for role, m in metrics.items()
        if role.endswith("-unit")
    }
    return DemoResult(
        report,
        seconds,
        shared,
        rtpm,
        [s.latency_ms for s in collector.seen if s.latency_ms is not None],
        exit_codes,
        senders.failures,
        send.undecodable + receive.undecodable,
        senders=f"{workload.senders} senders",
        reads=(send, receive),
    )


def summary(result: DemoResult) -> list[str]:
    r = result.report
    lat = result.latencies_ms
    rt = result.round_trips_per_message
    rt_all = statistics.fmean(rt.values()) if rt else 0.0
    lines = [
        "Summary",
        f"  messages sent         {r.sent:>9}   (acknowledged by Kafka, {result.senders})",
        f"  messages received     {r.received:>9}   (read_committed, "
        f"{r.queues_used} receive queues)",
        f"  groups sent           {r.groups_sent:>9}   complete, in order, on one queue: "
        f"{r.groups_complete}",
        f"  ordinary messages     {r.ordinary_sent:>9}",
        f"  lost                  {r.lost:>9}",
        f"  duplicated            {r.duplicated:>9}",
        f"  order violations      {r.reordered:>9}",
        f"  split groups          {r.split_groups:>9}",
        *interleaving_lines(r, result.shared),
        f"  throughput            {r.received / max(result.seconds, 1e-9):>9,.0f}   msg/s end to "
        f"end over {result.seconds:.1f} s",
        f"  latency p50 / p99     {percentile(lat, 0.5):>9,.0f}   / {percentile(lat, 0.99):,.0f}"
        " ms (sender create time -> checker)",
        f"  Redis round trips     {rt_all:>9.4f}   per message per unit ("
        + ", ".join(f"{k} {v:.4f}" for k, v in sorted(rt.items()))
        + ")",
    ]
    for name, examples in (
        ("lost", r.lost_examples),
        ("split", r.split_examples),
        ("reordered", r.reorder_examples),
    ):
        if examples:
            lines.append(f"  e.g. {name}: {'; '.join(examples)}")
    interleaved = sum(s.interleaved for s in r.sides) if r.sides else r.interleaved
    if result.ok and interleaved == 0:
        lines.append(
            "RESULT: PASS - every group reached one receive queue, in order, uninterleaved; "
            "nothing lost or duplicated."
        )
    elif result.ok:
        lines.append(
            "RESULT: PASS - every group reached one receive queue, in order; nothing lost or "
            f"duplicated; {interleaved} messages interleaved, each while every other "
            "destination of its side was busy (capacity rule; add destinations, or use "
            "busy policy 'wait' for none at all)."
        )
    else:
        lines.append("RESULT: FAIL - " + "; ".join(result.violations))
    return lines


def interleaving_lines(r: Report, shared: dict[str, int]) -> list[str]:
    """The capacity rule's verdict per side, with the router's own share counters beside
    it as an explanation (they never excuse anything)."""
    lines = []
    for side in r.sides:
        lines.append(
            f"  interleaved, {side.side:<7} {side.interleaved:>9}   allowed {side.allowed}, "
            f"disallowed {side.disallowed} (capacity rule over {side.destinations} "
            f"destinations, release slack {side.release_slack_ms} ms)"
        )
        lines.extend(f"    disallowed: {e}" for e in side.examples)
    if not r.sides:
        lines.append(f"  interleaved           {r.interleaved:>9}   (not judged: no append times)")
    lines.append(
        f"  busy shares (router)  send {shared.get('send', 0)}, receive "
        f"{shared.get('receive', 0)}   (the router's own counters, never part of the verdict)"
    )
    return lines


def run_demo(
    base: RouterSettings,
    workload: WorkloadSpec,
    spec: PipelineSpec,
    run_dir: Path,
    *,
    config_file: Path | None = None,
    keep: bool = False,
    out: TextIO = sys.stdout,
) -> DemoResult:
    def say(line: str) -> None:
        print(line, file=out, flush=True)

    pipeline = Pipeline(
        base, spec, run_dir, config_file=config_file, name=workload.run_id, keep=keep
    )
    t = pipeline.settings.topology
    say(
        f"demo: topology {t.name!r}: {len(t.send_queues)} send queues x "
        f"{t.send_queue_partitions} partitions -> {t.receive_units} receive-side units "
        f"(transfer partitions) -> {len(t.receive_queues)} receive queues"
    )
    say(
        f"   Kafka {pipeline.settings.kafka.bootstrap_servers}, Redis {pipeline.settings.redis.url}"
    )
    say(
        f"[1/4] creating topics, starting {spec.send_units} send units, {spec.receive_units} "
        f"receive units and {spec.sweepers} sweeper as processes (logs: {run_dir / 'logs'})"
    )
    t0 = time.monotonic()
    try:
        pipeline.start()
        say(f"   every partition has a unit ({time.monotonic() - t0:.1f} s)")
        say(
            f"[2/4] sending {workload.messages} messages: {workload.senders} senders, "
            f"{workload.grouped_fraction:.0%} in orders of 1..{workload.max_group} lines"
        )
        result = run_pipeline_workload(pipeline, workload, say)
        say(
            "[3/4] units stopped with SIGTERM: "
            + ", ".join(f"{n}={c}" for n, c in sorted(result.exit_codes.items()))
        )
        say(
            "[4/4] verified what the destinations hold (transfer topic and receive queues, "
            "read_committed) against what was sent"
        )
        for line in summary(result):
            say(line)
        return result
    finally:
        pipeline.stop()
        if not keep:
            pipeline.cleanup()
