"""The demo (`make demo`, `python -m ops.demo`): the whole system, end to end, with a verdict.

Creates a fresh topology, starts send units, receive units and a sweeper as separate
processes, sends a realistic mix from several senders (orders of varied sizes mixed with
stock updates), stops the units, reads every destination of both sides to its end with
read_committed once the transaction timeout has passed, and checks: same queue, order,
nothing lost or duplicated, and every interleaving on either side against the capacity
rule (`ops.harness.verdict.capacity`). The router's own counters are printed to explain a verdict,
never to excuse one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ops.harness.console import Console, Row, SummaryItem, summary_lines
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stats import percentile
from ops.harness.traffic.collect import SideRead, read_sides, verdict
from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.records import deliveries
from ops.harness.verdict.verify import Report
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


def run_pipeline_workload(
    pipeline: Pipeline,
    workload: WorkloadSpec,
    say: Console | Callable[[str], None],
    timeout: float = 600.0,
) -> DemoResult:
    """Send the workload through a started pipeline, collect, stop it, and verify."""
    console = Console.of(say)
    collector = Collector(pipeline.settings, group_id=f"{pipeline.name}.checker")
    collector.start()
    senders = Senders(pipeline.settings, workload)
    t0 = time.monotonic()
    senders.start()
    with console.progress("sent", workload.messages) as bar:
        while not senders.join(timeout=0.5):
            bar.update(senders.attempted, f"received {collector.count():>7}")
            if time.monotonic() - t0 > timeout:
                break
        bar.update(senders.attempted, f"received {collector.count():>7}")
    expected = deliveries(senders.sent)  # a multicast message: once per target queue
    console.say(
        f"   all sent ({len(senders.sent)} acknowledged); waiting for the receive queues ..."
    )
    collector.wait_for(expected, timeout=max(timeout - (time.monotonic() - t0), 30))
    seconds = time.monotonic() - t0
    collector.stop()
    exit_codes = pipeline.stop()
    assert pipeline.stopped_at is not None
    shared = pipeline.shared()
    metrics = pipeline.unit_metrics()  # published by each unit as it exits
    settings = pipeline.settings
    console.say(
        "   units stopped; reading both sides to their end once the transaction timeout "
        f"({settings.kafka.transaction_timeout_ms} ms) has passed"
    )
    send, receive = read_sides(settings, pipeline.stopped_at)
    report = verdict(senders.sent, send, receive)
    promise = [  # the default policy's promise: no interleaving at all, whatever the load
        f"{s.side} side: {s.interleaved} interleaved under policy wait"
        for s in report.sides
        if s.interleaved and pipeline.spec.busy_policy == "wait"
    ]
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
        extra_violations=promise,
        reads=(send, receive),
    )


SUMMARY_WIDTH = 22  # the label column of the demo's summary


def summary(result: DemoResult) -> list[str]:
    """The summary as plain lines (what CI logs and the tests read)."""
    return summary_lines(summary_rows(result), SUMMARY_WIDTH)


def summary_rows(result: DemoResult) -> list[SummaryItem]:
    r = result.report
    lat = result.latencies_ms
    rt = result.round_trips_per_message
    rt_all = statistics.fmean(rt.values()) if rt else 0.0
    items: list[SummaryItem] = [
        "Summary",
        Row("messages sent", f"{r.sent}", f"(acknowledged by Kafka, {result.senders})"),
        Row(
            "messages received",
            f"{r.received}",
            f"(read_committed, {r.queues_used} receive queues)",
        ),
        Row(
            "groups sent",
            f"{r.groups_sent}",
            f"complete, in order, on one queue: {r.groups_complete}",
        ),
        Row("ordinary messages", f"{r.ordinary_sent}"),
        Row("lost", f"{r.lost}"),
        Row("duplicated", f"{r.duplicated}"),
        Row("order violations", f"{r.reordered}"),
        Row("split groups", f"{r.split_groups}"),
        *interleaving_rows(r, result.shared),
        Row(
            "throughput",
            f"{r.received / max(result.seconds, 1e-9):,.0f}",
            f"msg/s end to end over {result.seconds:.1f} s",
        ),
        Row(
            "latency p50 / p99",
            f"{percentile(lat, 0.5):,.0f}",
            f"/ {percentile(lat, 0.99):,.0f} ms (sender create time -> checker)",
        ),
        Row(
            "Redis round trips",
            f"{rt_all:.4f}",
            "per message per unit ("
            + ", ".join(f"{k} {v:.4f}" for k, v in sorted(rt.items()))
            + ")",
        ),
    ]
    for name, examples in (
        ("lost", r.lost_examples),
        ("split", r.split_examples),
        ("reordered", r.reorder_examples),
        ("duplicated", r.duplicate_examples),
    ):
        if examples:
            items.append(f"  e.g. {name}: {'; '.join(examples)}")
    interleaved = sum(s.interleaved for s in r.sides) if r.sides else r.interleaved
    if result.ok and interleaved == 0:
        items.append(
            "RESULT: PASS - every group reached one receive queue, in order, uninterleaved; "
            "nothing lost or duplicated."
        )
    elif result.ok:
        items.append(
            "RESULT: PASS - every group reached one receive queue, in order; nothing lost or "
            f"duplicated; {interleaved} messages interleaved, each while every other "
            "destination of its side was busy (capacity rule; add destinations, or use "
            "busy policy 'wait' for none at all)."
        )
    else:
        items.append("RESULT: FAIL - " + "; ".join(result.violations))
    return items


def interleaving_lines(r: Report, shared: dict[str, int]) -> list[str]:
    return summary_lines(interleaving_rows(r, shared), SUMMARY_WIDTH)


def interleaving_rows(r: Report, shared: dict[str, int]) -> list[SummaryItem]:
    """The capacity rule's verdict per side, with the router's own share counters beside
    it as an explanation (they never excuse anything). Each row names its label width:
    the demo's and chaos's summaries share them."""
    items: list[SummaryItem] = []
    for side in r.sides:
        items.append(
            Row(
                f"interleaved, {side.side}",
                f"{side.interleaved}",
                f"allowed {side.allowed}, disallowed {side.disallowed} (capacity rule over "
                f"{side.destinations} destinations, release slack {side.release_slack_ms} ms"
                + (f"; {side.held_up} releases held up by kills/restarts" if side.held_up else "")
                + ")",
                width=21,
            )
        )
        items.extend(f"    disallowed: {e}" for e in side.examples)
    if not r.sides:
        items.append(Row("interleaved", f"{r.interleaved}", "(not judged: no append times)", 22))
    items.append(
        Row(
            "busy shares (router)",
            f"send {shared.get('send', 0)}, receive {shared.get('receive', 0)}",
            "(the router's own counters, never part of the verdict)",
            width=22,
        )
    )
    return items


def run_demo(
    base: RouterSettings,
    workload: WorkloadSpec,
    spec: PipelineSpec,
    run_dir: Path,
    *,
    config_file: Path | None = None,
    keep: bool = False,
    out: TextIO | None = None,
) -> DemoResult:
    """`out`: where to write (default: stdout); rich on a terminal, plain text else."""
    console = Console(out)
    say = console.say
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
        f"   Kafka {pipeline.settings.kafka.bootstrap_servers}, "
        f"Redis {pipeline.settings.redis.where()}"
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
        result = run_pipeline_workload(pipeline, workload, console)
        say(
            "[3/4] units stopped with SIGTERM: "
            + ", ".join(f"{n}={c}" for n, c in sorted(result.exit_codes.items()))
        )
        say(
            "[4/4] verified what the destinations hold (transfer topic and receive queues, "
            "read_committed) against what was sent"
        )
        console.summary(summary_rows(result), SUMMARY_WIDTH)
        return result
    finally:
        pipeline.stop()
        if not keep:
            pipeline.cleanup()
