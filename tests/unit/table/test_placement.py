"""Operators' steering on the pure table model (`router.table.placement`): pinned entries and
draining destinations. The Lua runs the same rules:
`tests/integration/table/test_table_properties.py`."""

from __future__ import annotations

import itertools

import pytest

from router.table import placement, room, waits
from router.table.model import TableModel
from router.table.routing import RouteRequest, TraceStep, updated_at

NOW = 1_000_000


_tokens = itertools.count()


def req(
    gid: str | None, lane: str = "q/0", final: bool = False, seq: int | None = None
) -> RouteRequest:
    return RouteRequest(gid, final, 5_000, f"{lane}/{next(_tokens)}", lane, seq=seq)


def test_a_pinned_group_lands_on_its_destination_and_becomes_an_open_entry() -> None:
    t = TableModel(["a", "b", "c"])
    assert placement.pin(t, "P", "c", 5_000, NOW)
    assert t.entries["P"].state == placement.PINNED and t.entries["P"].lane == ""
    assert t.load == {"c": 1}  # it holds its destination before its first message
    got = t.route([req("X"), req("Y"), req("P", lane="q/3")], NOW + 1).decisions
    assert got == ["a", "b", "c"]  # new groups avoid the pinned destination
    e = t.entries["P"]
    assert (e.state, e.lane, e.dest) == ("open", "q/3", "c")
    assert e.updated_ms == updated_at(NOW + 1, 5_000)  # its last use, rounded up to a step
    assert t.load == {"a": 1, "b": 1, "c": 1}  # counted once
    assert t.route([req("P", lane="q/3", final=True)], NOW + 2).decisions == ["c"]


def test_pin_is_refused_for_a_group_with_an_entry_or_an_unknown_destination() -> None:
    t = TableModel(["a", "b"])
    t.route([req("G")], NOW)
    before = dict(t.entries)
    assert not placement.pin(t, "G", "b", 5_000, NOW)
    assert t.entries == before and t.load == {"a": 1}
    with pytest.raises(ValueError):
        placement.pin(t, "N", "z", 5_000, NOW)


@pytest.mark.parametrize("policy", ["share", "hold", "wait"])
def test_a_pinned_group_never_waits_even_on_a_busy_destination(policy: str) -> None:
    t = TableModel(["a"], policy)  # type: ignore[arg-type]
    t.route([req("BUSY")], NOW)
    assert placement.pin(t, "P", "a", 5_000, NOW)
    assert t.route([req("P", lane="q/1")], NOW + 1).decisions == ["a"]
    assert not t.room and t.load == {"a": 2}


def test_a_pinned_group_in_logical_order_out_of_sequence_is_admitted_to_its_destination() -> None:
    t = TableModel(["a", "b"], "wait")
    assert placement.pin(t, "L", "b", 5_000, NOW)
    assert t.route([req("L", seq=1)], NOW).decisions == [room.WAIT]
    e = t.entries["L"]
    assert (e.state, e.dest, e.next) == (room.ADMITTED, "b", 0)
    t2 = TableModel(["a", "b"])
    assert placement.pin(t2, "L", "b", 5_000, NOW)
    assert t2.route([req("L", seq=0)], NOW).decisions == ["b"]
    assert (t2.entries["L"].next, t2.entries["L"].state) == (1, "open")


def test_a_pinned_entry_is_swept_and_released_like_any() -> None:
    t = TableModel(["a"])
    placement.pin(t, "P", "a", 5_000, NOW)
    assert [s.guarantee_id for s in t.sweep(NOW + 5_001)] == ["P"] and t.load == {}
    placement.pin(t, "Q", "a", 5_000, NOW)
    assert t.release([("Q", "*")]) == 1 and t.load == {}


def test_new_groups_and_ordinary_messages_skip_a_draining_destination() -> None:
    t = TableModel(["a", "b", "c"])
    t.draining = {"b"}
    trace: list[TraceStep] = []
    got = t.route([req(f"G{i}") for i in range(4)] + [req(None)], NOW, trace=trace).decisions
    assert "b" not in got and got[:2] == ["a", "c"]  # then shared among a and c
    assert all(s.draining == {"b"} and "b" not in s.free | s.clean for s in trace)
    assert t.route([req(None)], NOW, batch="other").decisions[0] != "b"


def test_a_group_open_on_a_draining_destination_continues_there() -> None:
    t = TableModel(["a", "b"])
    t.route([req("OPEN")], NOW)
    t.draining = {"a"}
    assert t.route([req("OPEN"), req("NEW"), req("OPEN", final=True)], NOW).decisions == [
        "a",
        "b",
        "a",
    ]


def test_when_every_destination_drains_none_is_treated_as_draining() -> None:
    t = TableModel(["a", "b"])
    t.draining = {"a", "b", "gone"}
    assert t.excluded() == set()
    assert t.route([req("G1"), req("G2")], NOW).decisions == ["a", "b"]


def test_admission_and_a_shared_wait_timeout_skip_draining_destinations() -> None:
    t = TableModel(["a", "b"], "wait")
    t.route([req("A"), req("B"), req("W")], NOW)
    assert set(t.room) == {"W"}
    t.draining = {"a"}
    t.release([("A", "*")])  # a is clean, but draining: W still waits
    assert set(t.room) == {"W"} and t.entries["W"].state == room.WAITING
    assert waits.time_out(t, NOW + 10, 0, "share") == [("W", "b")]  # shared, not on a
    t.draining = set()
    t2 = TableModel(["a", "b"], "wait", draining={"a"})
    t2.route([req("B")], NOW)
    assert t2.entries["B"].dest == "b" and t2.route([req("W")], NOW).decisions == [room.WAIT]


def test_evicting_a_destination_releases_only_the_entries_on_it() -> None:
    t = TableModel(["a", "b"])
    t.route([req("A"), req("B"), req("A2")], NOW)  # A2 shares a
    assert t.release([(g, "@a") for g in ("A", "B", "A2")]) == 2
    assert set(t.entries) == {"B"} and t.load == {"b": 1}
