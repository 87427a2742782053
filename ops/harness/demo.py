"""The demo (`make demo`, `python -m ops.demo`): the whole system, end to end, with a verdict.

Creates a fresh topology, starts send units, receive units and a sweeper as separate
processes, sends a realistic mix from several senders (orders of varied sizes mixed with
stock updates), reads every receive queue with read_committed, and checks: same queue,
order, no interleaving while capacity allows, nothing lost or duplicated.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ops.harness.collect import Collector
from ops.harness.pipeline import Pipeline, PipelineSpec
from ops.harness.verify import Report, verify
from ops.harness.workload import Senders, WorkloadSpec
from router.config import RouterSettings


@dataclass
class DemoResult:
    report: Report
    seconds: float
    shared: dict[str, int]  # busy-destination shares per side (table counters)
    round_trips_per_message: dict[str, float]
    latencies_ms: list[float]
    exit_codes: dict[str, int]
    sender_failures: list[str]
    undecodable: int
    senders: str = ""  # who sent, for the summary: "4 senders", "the Spark sender"
    extra_violations: list[str] = field(default_factory=list)  # a caller's own checks

    @property
    def violations(self) -> list[str]:
        """Broken guarantees. Interleaving at a receive queue can only come from the
        receive side sharing a busy queue; with no such share it is a broken guarantee."""
        out = self.report.violations(interleaving_allowed=self.shared.get("receive", 0) > 0)
        if self.sender_failures:
            out.append(f"sender failures: {len(self.sender_failures)} ({self.sender_failures[0]})")
        if self.undecodable:
            out.append(f"undecodable records on receive queues: {self.undecodable}")
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
    last = 0.0
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
    time.sleep(0.2)  # let the last metrics publication land (written before exit)
    report = verify(senders.sent, collector.seen)
    stats = pipeline.table_stats()
    shared: dict[str, int] = {side: s.get("shared", 0) for side, s in stats.items()}
    metrics = pipeline.unit_metrics()
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
        collector.undecodable,
        senders=f"{workload.senders} senders",
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
        f"  interleavings         {r.interleaved:>9}   (busy destinations shared: send side "
        f"{result.shared.get('send', 0)}, receive side {result.shared.get('receive', 0)})",
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
    if result.ok and r.interleaved == 0:
        lines.append(
            "RESULT: PASS - every group reached one receive queue, in order, uninterleaved; "
            "nothing lost or duplicated."
        )
    elif result.ok:
        lines.append(
            "RESULT: PASS - every group reached one receive queue, in order; nothing lost or "
            f"duplicated; {r.interleaved} messages interleaved, which policy 'share' allows "
            "only because every receive queue was busy at the time (add receive queues or "
            "use policy 'hold')."
        )
    else:
        lines.append("RESULT: FAIL - " + "; ".join(result.violations))
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
        say("[4/4] verified what the receive queues hold against what was sent")
        for line in summary(result):
            say(line)
        return result
    finally:
        pipeline.stop()
        if not keep:
            pipeline.cleanup()
