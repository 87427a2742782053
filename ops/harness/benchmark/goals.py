"""Issue 31's figures (performance, round three) from one `make bench`, beside their values
before that round and their goals: a table in results.md and lines in the run's output.
The Spark figures are `make spark-bench`'s (`ops/harness/spark/bench_report.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from ops.harness.benchmark.model import (
    JAVA_CHAINED,
    JAVA_RELAY,
    PATH,
    PY_RELAY,
    SEND,
    UNSATURATED,
    Results,
)
from ops.harness.console import Column, markdown_table

BEFORE_DATES = "2026-11-25/28"  # make bench on fresh clones, before the round
BEFORE = f"before ({BEFORE_DATES})"
LIGHT_RATE = 1_000.0  # msg/s: the whole path at light load


@dataclass(frozen=True)
class Figure:
    name: str
    now: str  # the figure, or "not measured"
    before: str
    goal: str
    met: bool | None  # None: not measured


def _ratio(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def _at_least(name: str, ratio: float, before: str, goal: float) -> Figure:
    """A ratio of the unsaturated headline's rounds that must reach `goal` (0: not measured)."""
    return Figure(
        f"{name}, unsaturated headline (median of the rounds)",
        _ratio(ratio) if ratio else "not measured",
        before,
        f">= {goal}",
        ratio >= goal if ratio else None,
    )


def figures(results: Results) -> list[Figure]:
    """The round's figures this run measured (a stage left out reads "not measured")."""
    out: list[Figure] = []
    rounds = results.rounds.get("unsaturated", [])
    java = results.round_ratio("unsaturated", SEND, JAVA_RELAY) if rounds else 0.0
    out.append(_at_least("send unit / Java relay", java, "0.37-0.42", 0.9))
    raw = results.round_ratio("unsaturated") if rounds else 0.0
    out.append(_at_least("send unit / raw relay", raw, "0.98-1.00", 0.95))
    send_cpu, raw_cpu = results.cpu(SEND, UNSATURATED), results.cpu(PY_RELAY, UNSATURATED)
    cpu = send_cpu / raw_cpu if send_cpu and raw_cpu else 0.0
    out.append(
        Figure(
            "CPU per message, send unit / raw relay, unsaturated",
            f"{cpu:.2f} ({send_cpu:.1f} vs {raw_cpu:.1f} CPU s/M)" if cpu else "not measured",
            "1.66-1.83",
            "<= 1.3",
            cpu <= 1.3 if cpu else None,
        )
    )
    paths = [x.rate for x in results.latency if x.path == PATH]
    half = max(paths) if paths else None
    for rate, name, before, p50_goal, p99_goal in (
        (half, "whole path at half load / two chained Java relays", "1.58-1.86", 1.2, 1.0),
        (LIGHT_RATE, "whole path at 1,000 msg/s / two chained Java relays", "0.99-1.01", 1.0, 1.0),
    ):
        lat = results.latency_at(PATH, rate) if rate is not None else None
        chained = results.latency_at(JAVA_CHAINED, rate) if rate is not None else None
        if lat is None or chained is None or not chained.p50_ms or not chained.p99_ms:
            out.append(Figure(name, "not measured", before, f"p50 <= {p50_goal}", None))
            continue
        p50, p99 = lat.p50_ms / chained.p50_ms, lat.p99_ms / chained.p99_ms
        out.append(
            Figure(
                name,
                f"p50 {p50:.2f}, p99 {p99:.2f} (at {rate:,.0f} msg/s)",
                before,
                f"p50 <= {p50_goal}, p99 <= {p99_goal}",
                p50 <= p50_goal and p99 <= p99_goal,
            )
        )
    return out


COLUMNS = (Column("figure"), Column("now"), Column(BEFORE), Column("goal"), Column("met"))


def _met(f: Figure) -> str:
    return "" if f.met is None else ("met" if f.met else "not met")


def table(results: Results) -> str:
    """The figures as a Markdown table."""
    rows = [(f.name, f.now, f.before, f.goal, _met(f)) for f in figures(results)]
    return "\n".join(markdown_table(COLUMNS, rows))


def lines(results: Results) -> list[str]:
    """One line per figure, for the run's output."""
    return [
        f"round three: {f.name}: {f.now} (before, {BEFORE_DATES}: {f.before}; goal {f.goal}"
        f"{'; ' + _met(f) if _met(f) else ''})"
        for f in figures(results)
    ]
