"""The bench's breakdown of a unit's time per transaction (`ops/harness/benchmark/phases.py`):
from the units' summed counters and from the Java relay's stop lines. Pure parsing."""

from __future__ import annotations

from ops.harness.benchmark import phases


def test_counters_give_batches_messages_and_each_phase() -> None:
    batches, spent = phases.from_counters(
        {"batches": 4, "messages_in": 2000, "time_poll_us": 8000, "time_commit_us": 40_000}
    )
    assert batches == 4
    assert spent == {"time_poll_us": 8000, "time_commit_us": 40_000, "messages": 2000}
    (row,) = phases.rows([("send unit", 1, batches, spent)])
    assert row[:3] == ["send unit", "1", "500"]
    assert row[3] == "2.00" and row[-1] == "10.00"  # ms per transaction
    assert row[4] == ""  # a phase it did not publish


def test_java_stop_lines_are_summed_over_relays() -> None:
    logs = [
        "relay j1 stopped after forwarding 1000 records\n"
        "relay timings batches=2 time_poll_us=100 time_produce_us=300 time_offsets_us=50"
        " time_commit_us=900\n",
        "relay j2 stopped after forwarding 500 records\n"
        "relay timings batches=1 time_poll_us=50 time_produce_us=100 time_offsets_us=20"
        " time_commit_us=400\n",
        "no timings: a relay killed before its stop",
    ]
    batches, spent = phases.from_java_logs(logs)
    assert batches == 3
    assert spent == {
        "messages": 1500,
        "time_poll_us": 150,
        "time_produce_us": 400,
        "time_offsets_us": 70,
        "time_commit_us": 1300,
    }
    assert "| java relay | 1 | 500 |" in phases.table([("java relay", 1, batches, spent)])


def test_stages_without_a_breakdown_are_left_out() -> None:
    assert phases.rows([("raw", 1, 0, {"messages": 0}), ("x", 1, 3, {"messages": 3})]) == []
