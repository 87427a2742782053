"""The tables at rest (ops.harness.verdict.rest): what a table may keep once a run
delivered everything and every unit stopped, and what it may not."""

from __future__ import annotations

from ops.harness.verdict.rest import Snapshot, at_rest

NOW = 1_000_000


def test_a_table_with_only_counters_finished_groups_and_dead_leases_is_clean() -> None:
    report = at_rest(
        Snapshot(
            "send",
            {
                "entries": [],
                "load": [("q1", "0"), ("q2", "0")],
                "inflight": [("batch-1", str(NOW - 1))],  # expired: a dead unit's
                "parks": [("b|g", str(NOW))],  # expiring this very millisecond
                "done": [("g", "3|99")],  # not judged: logical order's memory
            },
        ),
        NOW,
    )
    assert report.clean and report.line() == "send clean" and report.examples == []


def test_every_kind_of_leftover_is_counted_and_shown() -> None:
    report = at_rest(
        Snapshot(
            "receive",
            {
                "entries": [("g1", "q1|1|2|3||p0"), ("g2", "q2|1|2|3||p1")],
                "room": [("g3", "12")],
                "admitted": [("g4", "q1")],
                "closing": [("g1", "5")],
                "outbox": [('{"g": "g5"}', "")],
                "load": [("q1", "1"), ("q2", "0"), ("q3", "-1")],
                "inflight": [("batch-2", str(NOW + 250))],
                "parks": [("b|g", str(NOW + 1))],
            },
        ),
        NOW,
    )
    assert not report.clean
    assert report.leftovers == {
        "entries": 2,
        "room": 1,
        "admitted": 1,
        "closing": 1,
        "outbox": 1,
        "load": 2,
        "live inflight": 1,
        "live parks": 1,
    }
    assert "receive entries: g1 = q1|1|2|3||p0" in report.examples
    assert "receive inflight: batch-2 live for 250 ms" in report.examples
    assert report.line().startswith("receive: 1 admitted, 1 closing, 2 entries")
