"""Issue 31's figures as `make bench` reports them: now, before, goal (pure: results by
hand)."""

from __future__ import annotations

from ops.harness.benchmark.goals import figures, lines, table
from ops.harness.benchmark.model import (
    JAVA_CHAINED,
    JAVA_RELAY,
    PATH,
    PY_RELAY,
    SEND,
    UNSATURATED,
    BenchSpec,
    Latency,
    Results,
    Throughput,
)


def _results() -> Results:
    r = Results(BenchSpec())
    r.rounds["unsaturated"] = [
        {PY_RELAY: 50_000, JAVA_RELAY: 50_000, SEND: 40_000},
        {PY_RELAY: 40_000, JAVA_RELAY: 50_000, SEND: 47_000},
        {PY_RELAY: 50_000, JAVA_RELAY: 40_000, SEND: 45_000},
    ]
    # CPU s per million: 1 M messages each, 8 vs 12 CPU s
    r.throughput += [
        Throughput(PY_RELAY, UNSATURATED, 1, 1_000_000, 20.0, 8.0),
        Throughput(SEND, UNSATURATED, 1, 1_000_000, 20.0, 12.0),
    ]
    for rate, path_p50, path_p99 in ((1_000.0, 30.0, 60.0), (9_000.0, 60.0, 100.0)):
        r.latency += [
            Latency(JAVA_CHAINED, rate, 100, 30.0, 80.0, 90.0),
            Latency(PATH, rate, 100, path_p50, path_p99, 120.0),
        ]
    return r


def test_each_figure_is_beside_its_value_before_and_its_goal() -> None:
    by_name = {f.name: f for f in figures(_results())}
    java = by_name["send unit / Java relay, unsaturated headline (median of the rounds)"]
    assert (java.now, java.before, java.goal, java.met) == ("0.94", "0.37-0.42", ">= 0.9", True)
    raw = by_name["send unit / raw relay, unsaturated headline (median of the rounds)"]
    assert (raw.now, raw.met) == ("0.90", False)  # median of 0.80, 1.175, 0.90
    cpu = by_name["CPU per message, send unit / raw relay, unsaturated"]
    assert cpu.now == "1.50 (12.0 vs 8.0 CPU s/M)" and cpu.met is False
    half = by_name["whole path at half load / two chained Java relays"]
    assert half.now == "p50 2.00, p99 1.25 (at 9,000 msg/s)" and half.met is False
    light = by_name["whole path at 1,000 msg/s / two chained Java relays"]
    assert light.now == "p50 1.00, p99 0.75 (at 1,000 msg/s)" and light.met is True


def test_a_stage_left_out_reads_not_measured() -> None:
    found = figures(Results(BenchSpec()))
    assert {f.now for f in found} == {"not measured"}
    assert {f.met for f in found} == {None}
    assert "| send unit / Java relay" in table(Results(BenchSpec()))


def test_the_lines_name_the_before_and_the_goal() -> None:
    first = lines(_results())[0]
    assert first == (
        "round three: send unit / Java relay, unsaturated headline (median of the rounds): "
        "0.94 (before, 2026-11-25/28: 0.37-0.42; goal >= 0.9; met)"
    )
