"""What the benchmark reports: the tables, the lines against the goals, the capacity of one
Redis, and results.md / results.json (the plots: ops/harness/benchmark/plots.py)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ops.harness.benchmark import cellcost, goals, phases
from ops.harness.benchmark.model import (
    GROUPED_ONLY,
    HA_SUFFIX,
    HEADLINES,
    JAVA_CHAINED,
    JAVA_RELAY,
    ORDINARY,
    PATH,
    PY_CHAINED,
    PY_RELAY,
    RECEIVE,
    SCRIPT_GOAL_US,
    SEND,
    TRACED,
    TRACED_10,
    Results,
    Workload,
)
from ops.harness.benchmark.plots import plots
from ops.harness.benchmark.trace import trace_table
from ops.harness.console import Column, markdown_table

THROUGHPUT_COLUMNS = (
    Column("stage"),
    Column("processes", "right"),
    Column("workload"),
    Column("msg/s", "right"),
    Column("MB/s", "right"),
    Column("CPU s per 1M msgs", "right"),
    Column("Redis round trips/msg", "right"),
    Column("vs raw relay", "right"),
    Column("vs Java relay", "right"),
    Column("Redis script us/msg", "right"),
    Column("Redis CPU us/msg", "right"),
)
LATENCY_COLUMNS = (
    Column("path"),
    Column("offered load (msg/s)", "right"),
    Column("messages", "right"),
    Column("p50 (ms)", "right"),
    Column("p99 (ms)", "right"),
    Column("p99.9 (ms)", "right"),
)
REDIS_GOAL = 500_000  # messages/s one Redis routes for the whole fleet (issue 15)


def throughput_rows(results: Results) -> list[list[str]]:
    rows = []
    for t in results.throughput:
        ref, java = results.baseline(t), results.java_baseline(t)
        unit = t.messages_in > 0
        rows.append(
            [
                t.stage,
                f"{t.processes}",
                t.workload.label,
                f"{t.msg_s:,.0f}",
                f"{t.mb_s:.1f}",
                f"{t.cpu_s_per_million:.1f}",
                f"{t.round_trips_per_msg:.4f}" if unit else "",
                f"{t.msg_s / ref:.2f}" if ref else "",
                f"{t.msg_s / java:.2f}" if java else "",
                f"{t.redis_script_us_per_msg:.2f}" if unit and t.redis_script_calls else "",
                f"{t.redis_cpu_us_per_msg:.2f}" if unit and t.redis_script_calls else "",
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
        for lat in sorted(results.latency, key=lambda x: (x.rate, x.path))
    ]


def table(results: Results) -> str:
    return "\n".join(markdown_table(THROUGHPUT_COLUMNS, throughput_rows(results)))


def latency_table(results: Results) -> str:
    return "\n".join(markdown_table(LATENCY_COLUMNS, latency_rows(results)))


@dataclass(frozen=True)
class RedisCost:
    """Redis's cost per message routed through both sides (a send and a receive unit)."""

    workload: Workload
    send_script_us: float
    receive_script_us: float
    send_cpu_us: float
    receive_cpu_us: float
    us_per_call: float  # the scripts' mean server time per call
    messages_per_call: float
    steady_cpu_us: float = 0.0  # both sides' CPU once the workload's groups are open

    @property
    def script_us(self) -> float:
        return self.send_script_us + self.receive_script_us

    @property
    def cpu_us(self) -> float:
        return self.send_cpu_us + self.receive_cpu_us

    @property
    def ceiling(self) -> float:
        """Messages/s one Redis routes through both sides with its one thread busy: from
        its whole CPU (network I/O and parsing included), the honest ceiling."""
        return 1e6 / self.cpu_us if self.cpu_us > 0 else 0.0

    @property
    def script_ceiling(self) -> float:
        """The same counting only time inside the scripts (INFO commandstats)."""
        return 1e6 / self.script_us if self.script_us > 0 else 0.0


def redis_costs(results: Results) -> dict[str, RedisCost]:
    """Per traffic kind ("ordinary", "grouped", the headlines): Redis's cost per message,
    from the first send-unit and receive-unit run of that workload."""
    kinds = {"ordinary": ORDINARY, "grouped": GROUPED_ONLY, **HEADLINES}
    out = {}
    for name, w in kinds.items():
        send, receive = results.find(SEND, w), results.find(RECEIVE, w)
        if not (send and receive and send.redis_script_calls and receive.redis_script_calls):
            continue
        calls = send.redis_script_calls + receive.redis_script_calls
        out[name] = RedisCost(
            w,
            send.redis_script_us_per_msg,
            receive.redis_script_us_per_msg,
            send.redis_cpu_us_per_msg,
            receive.redis_cpu_us_per_msg,
            (send.redis_script_us + receive.redis_script_us) / calls,
            (send.messages_in + receive.messages_in) / calls,
            send.steady_redis_cpu_us_per_msg + receive.steady_redis_cpu_us_per_msg
            if send.steady_redis_messages and receive.steady_redis_messages
            else 0.0,
        )
    return out


def summary(results: Results) -> list[str]:
    """The headline figures against the goals."""
    out = []
    for name, rounds in results.rounds.items():
        w = HEADLINES[name]
        out.append(
            f"send unit / raw relay at {w.label} ({name}): {results.round_ratio(name):.2f} "
            f"(median of {len(rounds)} side-by-side pairs; target >= 0.80)"
        )
        if any(JAVA_RELAY in r for r in rounds):
            out.append(
                f"send unit / Java relay at {w.label} ({name}): "
                f"{results.round_ratio(name, SEND, JAVA_RELAY):.2f}; raw relay / Java relay: "
                f"{results.round_ratio(name, PY_RELAY, JAVA_RELAY):.2f} "
                f"(median of {len(rounds)} side-by-side rounds)"
            )
        else:
            java, send = results.typical(JAVA_RELAY, w), results.typical(SEND, w)
            if java and send:
                out.append(
                    f"send unit / Java relay at {w.label} ({name}): {send / java:.2f} "
                    "(medians of their runs, not side by side)"
                )
        py, send_cpu, java_cpu = (results.cpu(s, w) for s in (PY_RELAY, SEND, JAVA_RELAY))
        if py and send_cpu:
            java_note = f"; Java relay {java_cpu:.1f}" if java_cpu else ""
            out.append(
                f"CPU per message at {name}: send unit {send_cpu:.1f} vs raw relay {py:.1f} "
                f"CPU s/M = {send_cpu / py:.2f} (goal <= 1.3){java_note}"
            )
    key = results.spec.key()
    unit = results.find(SEND, key)
    if unit:
        grows = ""
        if results.max_batch_size > results.batch_size:
            grows = f", growing to {results.max_batch_size} under a backlog"
        out.append(
            f"Redis round trips per message (send unit, batch size "
            f"{results.batch_size}{grows}): {unit.round_trips_per_msg:.4f} (target <= 0.02)"
        )
    out += latency_summary(results)
    for name, cost in redis_costs(results).items():
        goal = f"; goal <= {SCRIPT_GOAL_US:g} us of Redis CPU" if name == "grouped" else ""
        steady = ""
        if cost.steady_cpu_us:
            steady = (
                " over the whole run (the table's fill, every group's first message, "
                f"included), {cost.steady_cpu_us:.2f} us once its "
                f"{cost.workload.open_groups:,} groups are open"
            )
        out.append(
            f"Redis per message through both sides, {name} ({cost.workload.label}): "
            f"{cost.script_us:.2f} us in scripts ({cost.us_per_call:.0f} us per call, "
            f"{cost.messages_per_call:.0f} messages per call), {cost.cpu_us:.2f} us of server "
            f"CPU{steady}{goal} (at one unit's pace: Redis idles between calls, which makes each "
            f"dearer; near its ceiling it runs them back to back, the scripts' own lines "
            f"below): one Redis routes about {cost.ceiling:,.0f} msg/s at this pace "
            f"({cost.script_ceiling:,.0f} counting scripts only; goal >= {REDIS_GOAL:,})"
        )
    out += [f"the routing scripts alone, no Kafka, {line}" for line in results.scripts]
    out += list(cellcost.lines(results.cluster))
    for stage in (PY_RELAY, SEND):
        one, two = results.typical(stage, key, 1), results.typical(stage, key, 2)
        if one and two:
            out.append(
                f"{stage}: 2 processes / 1 = {two / one:.2f} (against the median of the "
                f"1-process runs; target >= 1.7 where the cores allow; this machine has "
                f"{os.cpu_count()} cores, shared with the broker and Redis)"
            )
    for stage, w in ((SEND, TRACED), (RECEIVE, TRACED), (SEND, TRACED_10)):
        pair = results.tracing_cost(stage, w)
        if pair:
            off, on = pair
            out.append(
                f"{stage} tracing on / off ({on.workload.label}, spans by OTLP to Jaeger): "
                f"throughput {on.msg_s / off.msg_s:.2f} ({on.msg_s:,.0f} vs {off.msg_s:,.0f} "
                f"msg/s), CPU per message {on.cpu_s_per_million / off.cpu_s_per_million:.2f} "
                f"({on.cpu_s_per_million:.1f} vs {off.cpu_s_per_million:.1f} CPU s/M)"
            )
    ha_raw = [t for t in results.throughput if t.stage == PY_RELAY + HA_SUFFIX]
    ha_send = [t for t in results.throughput if t.stage == SEND + HA_SUFFIX]
    if ha_raw and ha_send:
        a, b = ha_send[0], ha_raw[0]
        out.append(
            f"send unit / raw relay on three brokers (acks=all, min.insync.replicas=2, "
            f"{a.workload.label}): {a.msg_s / b.msg_s:.2f} ({a.msg_s:,.0f} vs {b.msg_s:,.0f} "
            f"msg/s)"
        )
    return out


def latency_summary(results: Results) -> list[str]:
    paths = [x for x in results.latency if x.path == PATH]
    if not paths:
        return []
    out = []
    half = max(x.rate for x in paths)
    for lat in sorted(paths, key=lambda x: x.rate):
        py, java = (results.latency_at(p, lat.rate) for p in (PY_CHAINED, JAVA_CHAINED))
        goals = ""
        if lat.rate == half:
            goals = "; goals p50 <= 50, p99 <= 200"
        elif lat.rate <= 1_000:
            goals = "; goal p50 <= 25"
        line = (
            f"whole path at {lat.rate:,.0f} msg/s{' (half load)' if lat.rate == half else ''}: "
            f"p50 {lat.p50_ms:.1f} ms, p99 {lat.p99_ms:.1f} ms{goals}"
        )
        if java and java.p50_ms and java.p99_ms:
            line += (
                f"; / chained Java relays ({java.p50_ms:.1f} / {java.p99_ms:.1f} ms): p50 "
                f"{lat.p50_ms / java.p50_ms:.2f}, p99 {lat.p99_ms / java.p99_ms:.2f} (goal <= 1.5)"
            )
        out.append(line)
        if lat.rate == half and py and py.p99_ms:
            out.append(
                f"whole-path p99 / chained raw relays p99: {lat.p99_ms / py.p99_ms:.2f} "
                f"({lat.p99_ms:.1f} vs {py.p99_ms:.1f} ms at {lat.rate:,.0f} msg/s; target <= 2)"
            )
    return out


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
            "## Round three (issue 31): now, before, goal\n\n" + goals.table(results),
        ]
        + (
            ["## Where the latency goes (trace)\n\n" + trace_table(results.traces)]
            if results.traces
            else []
        )
        + [
            "## Where a unit's time goes, per transaction\n\n"
            + phases.table((t.stage, t.processes, t.batches, t.phases) for t in results.throughput)
        ]
    )
    (out_dir / "results.md").write_text(md + "\n")
    ratio_rounds = results.rounds.get(results.ratio_headline(), [])
    (out_dir / "results.json").write_text(
        json.dumps(
            {
                "throughput": [
                    {**asdict(t), "msg_s": t.msg_s, "mb_s": t.mb_s} for t in results.throughput
                ],
                "latency": [asdict(x) for x in results.latency],
                "rounds": results.rounds,
                "key_pairs": [(r[PY_RELAY], r[SEND]) for r in ratio_rounds],
                "ratio": results.ratio,
                "traces": [asdict(t) for t in results.traces],
                "redis": {
                    name: {**asdict(c), "ceiling_msg_s": c.ceiling}
                    for name, c in redis_costs(results).items()
                },
                "cluster": [
                    {
                        **asdict(r),
                        "cpu_us": {p: r.cpu_us(p) for p in r.used},
                        "busiest_us": r.peak_us,
                        "ceiling_msg_s": r.ceiling,
                    }
                    for r in results.cluster
                ],
            },
            indent=2,
        )
    )
    plots(results, out_dir)
    return md
