"""The Spark benchmark's results (pure): figures from the queries' progress reports and
the receiver's output, the table `make spark-bench` prints, and the verdict line."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ops.harness.spark import bench_hops
from ops.harness.spark import bench_stats as stats
from ops.harness.spark.bench_output import Completeness, Output


def figures(
    receiver_progress: Sequence[Mapping[str, Any]],
    sender_progress: Sequence[Mapping[str, Any]],
    got: Output,
    complete: Completeness,
    window_ms: tuple[float, float],
    finals: Mapping[str, Mapping[str, tuple[int, int | None]]] | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    """Rates, latencies, completeness and each query's phase profile, over the steady
    window (wall-clock ms: after the warm-up, until the sender stopped); with `finals`
    (`bench_hops.final_times` of the send queues, the transfer topic and the receive
    queues, by those names), each hop's share of the group latency. `rate`: the load
    offered (the goal depends on it: `bench_stats.goal_for`)."""
    start, end = round(window_ms[0]), round(window_ms[1])
    recv_batches = stats.batches(receiver_progress)
    send_batches = stats.batches(sender_progress)
    committed = {b.batch_id: b.committed_ms for b in recv_batches}
    points = [(committed[b], n) for b, n in got.messages_per_batch.items() if b in committed]
    achieved = stats.steady_rate(points, start, end)
    # Offered: the rows the rate source generated, at the messages per row it made.
    per_row = complete.expected_messages / max(complete.generated_rows, 1)
    offered = stats.steady_rate([(b.committed_ms, b.input_rows) for b in send_batches], start, end)
    latency = stats.latency_summary(stats.latencies_ms(got.groups, committed, start, end))
    steady = [b for b in recv_batches if start <= b.committed_ms <= end]
    sent_steady = [b for b in send_batches if start <= b.committed_ms <= end]
    ok = complete.ok and not got.rows.get("violations") and not got.rows.get("duplicates")
    hops: dict[str, Any] = {}
    if finals is not None:
        done = {g: committed[b] for g, b in got.batch_of_group.items() if b in committed}
        received = finals["receive"]
        created = {g: c for g, (_, c) in received.items() if c is not None}
        rows, lacking = bench_hops.join_times(
            created,
            {g: t for g, (t, _) in finals["send"].items()},
            {g: t for g, (t, _) in finals["transfer"].items()},
            {g: t for g, (t, _) in received.items()},
            done,
        )
        hops = {"hops": bench_hops.hop_figures(rows, start, end), "lacking": lacking}
    return {
        "offered_msg_s": offered.per_second * per_row,
        "achieved_msg_s": achieved.per_second,
        "window_s": achieved.seconds,
        "window_batches": achieved.batches,
        "latency": latency,
        "goal": dict(zip(("rate_msg_s", "p99_ms"), stats.goal_for(rate), strict=True)),
        "goal_met": ok and stats.goal_met(achieved.per_second, latency["p99_ms"], rate),
        "complete": ok,
        "completeness": asdict(complete),
        "output_rows": dict(got.rows),
        "violation_examples": list(got.reasons),
        "receiver_batches": len(recv_batches),
        "receiver_rows_per_batch": (
            sum(b.input_rows for b in steady) / len(steady) if steady else 0.0
        ),
        "receiver_profile_ms": stats.profile(steady),
        "sender_profile_ms": stats.profile(sent_steady),
        "hops": hops,
    }


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"  # NaN: no group in the window


def table_rows(result: Mapping[str, Any]) -> list[list[str]]:
    """(figure, value, note) rows of the results table."""
    lat, c, goal = result["latency"], result["completeness"], result["goal"]
    rows = [
        ["offered", f"{result['offered_msg_s']:,.0f} msg/s", "rate source, steady window"],
        [
            "achieved (receiver committed)",
            f"{result['achieved_msg_s']:,.0f} msg/s",
            f"{result['window_batches']} batches over {result['window_s']:.1f} s",
        ],
        ["group latency p50", f"{_ms(lat['p50_ms'])} ms", "last member created -> batch commit"],
        ["group latency p99", f"{_ms(lat['p99_ms'])} ms", f"{lat['groups']:,.0f} groups"],
        ["group latency max", f"{_ms(lat['max_ms'])} ms", ""],
        [
            "messages received / generated",
            f"{c['received_messages']:,} / {c['expected_messages']:,}",
            f"missing {c['missing']}, unexpected {c['unexpected']}, repeated {c['repeated']}",
        ],
        [
            "groups complete / generated",
            f"{c['groups_complete']:,} / {c['expected_groups']:,}",
            f"duplicates {result['output_rows'].get('duplicates', 0)}, "
            f"violations {result['output_rows'].get('violations', 0)}",
        ],
        [
            "receiver rows per batch",
            f"{result['receiver_rows_per_batch']:,.0f}",
            "steady window, mean",
        ],
    ]
    # With the real-time sender, the rate source is read by its upstream writer (a
    # micro-batch query); the sender itself has no micro-batches.
    source = "upstream writer" if _sender(result) == "real-time" else "sender"
    for name, profile in (("receiver", "receiver_profile_ms"), (source, "sender_profile_ms")):
        phases = result[profile]
        if phases:
            rows.append(
                [
                    f"{name} batch (mean ms)",
                    f"{phases.get('triggerExecution', 0):,.0f} ms",
                    ", ".join(
                        f"{k} {v:,.0f}" for k, v in phases.items() if k != "triggerExecution"
                    ),
                ]
            )
    hops = result.get("hops") or {}
    for hop, fig in (hops.get("hops") or {}).items():
        note = "the final's record times on each topic (bench_hops)"
        if hop == "whole":
            note = f"the hops' sum; {hops.get('lacking', 0)} committed groups lacked a time"
        rows.append(
            [f"hop: {hop} p50 / p99", f"{_ms(fig['p50_ms'])} / {_ms(fig['p99_ms'])} ms", note]
        )
    before_rate, before_p99 = stats.before_for(result["offered_msg_s"])
    rows.append(
        [
            f"before ({stats.BEFORE_DATES})",
            f"{_ms(before_p99)} ms",
            f"group latency p99, {before_rate:,.0f} msg/s sustained (the micro-batch sender)",
        ]
    )
    rows.append(
        [
            "goal",
            "met" if result["goal_met"] else "not met",
            f">= {goal['rate_msg_s']:,.0f} msg/s with p99 <= {goal['p99_ms'] / 1000:.0f} s"
            + ("" if result["complete"] else "; OUTPUT INCOMPLETE"),
        ]
    )
    return rows


def _sender(result: Mapping[str, Any]) -> str:
    return str((result.get("spec") or {}).get("sender", "micro-batch"))


def verdict(result: Mapping[str, Any]) -> str:
    """One line per run: sender, rate, latency and the goal, met or not."""
    lat, goal = result["latency"], result["goal"]
    return (
        f"RESULT spark-bench {_sender(result)} sender, offered "
        f"{result['offered_msg_s']:,.0f} msg/s: sustained "
        f"{result['achieved_msg_s']:,.0f} msg/s, group latency p50/p99 "
        f"{_ms(lat['p50_ms'])}/{_ms(lat['p99_ms'])} ms; goal (>= {goal['rate_msg_s']:,.0f} "
        f"msg/s with p99 <= {goal['p99_ms']:,.0f} ms) "
        + ("met" if result["goal_met"] else "not met")
        + f"; before ({stats.BEFORE_DATES}): p99 "
        + f"{_ms(stats.before_for(result['offered_msg_s'])[1])} ms"
        + ("" if result["complete"] else "; OUTPUT INCOMPLETE")
    )


def markdown(results: Sequence[Mapping[str, Any]]) -> str:
    """`results.md`: each run's table, side by side in one session."""
    parts = ["# make spark-bench", ""]
    for r in results:
        spec = r["spec"]
        parts += [
            f"## {_sender(r)} sender, {spec['rate']:,} msg/s offered, orders of "
            f"1..{spec['max_lines']} lines "
            f"({spec['seconds']:.0f} s of load, the first {spec['warmup_s']:.0f} s left out; "
            f"{r['date']})",
            "",
            "| figure | value | note |",
            "|---|---|---|",
            *[f"| {a} | {b} | {c} |" for a, b, c in table_rows(r)],
            "",
            verdict(r),
            "",
        ]
    return "\n".join(parts)
