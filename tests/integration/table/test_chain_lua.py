"""Chained drains (`router.table.chain`): the Lua script against the model, step by step, on
the real Redis, in the states the random property test rarely reaches (a destination
draining an admitted group while complete groups wait behind it)."""

from __future__ import annotations

import pytest

from router.table import room
from tests.fixtures.tablepair import Both


def waiting_behind_an_admitted_group(b: Both) -> None:
    """g0 opens on d0; g1 (2 messages), g2 and g3 (complete) wait; g0 ends, g1 is admitted."""
    assert b.route("b1", ("g0", False)) == ["d0"]
    assert b.route("b2", ("g1", False), ("g2", False), ("g2", True)) == [room.WAIT] * 3
    assert b.route("b3", ("g1", True), ("g3", True), ("g4", False)) == [room.WAIT] * 3
    b.settle("b1")
    b.settle("b2")
    b.settle("b3")
    b.settle("r", [("g0", "*")])
    assert b.model.entries["g1"].state == room.ADMITTED and b.model.entries["g1"].dest == "d0"


def test_complete_waiting_groups_join_the_destination_behind_its_group_in_order(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    waiting_behind_an_admitted_group(b)
    # g4 is not complete (no final): never chained; the others in the drainer's order
    candidates = [("g3", 1, b.final_of("g3")), ("g4", 1, "q/0/9"), ("g2", 2, b.final_of("g2"))]
    plan = [("d0", ["g1"], candidates)]
    assert b.chain(plan) == {"d0": ["g3", "g2"]}
    assert b.model.load == {"d0": 3} and b.model.room == {"g4": 1_000}
    # the drain commits all three finals: the destination is free, g4 is admitted to it
    b.settle("d1", [(g, b.final_of(g)) for g in ("g1", "g3", "g2")])
    b.agree()
    assert set(b.model.entries) == {"g4"} and b.model.entries["g4"].state == room.ADMITTED


def test_a_group_not_as_the_drainer_holds_it_is_not_chained(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    waiting_behind_an_admitted_group(b)
    g2 = b.final_of("g2")
    # a park it did not read; another final's position; a pseudo-group's name
    assert b.chain([("d0", ["g1"], [("g2", 1, g2), ("g3", 1, g2), ("~q/0", 0, "")])]) == {}
    # g4's final parked by a batch not yet committed (its park lease in flight): not yet
    assert b.route("b4", ("g4", True)) == [room.WAIT]
    g4 = b.final_of("g4")
    assert b.chain([("d0", ["g1"], [("g4", 2, g4)])]) == {}
    b.settle("b4")
    assert b.chain([("d0", ["g1"], [("g4", 2, g4)])]) == {"d0": ["g4"]}


@pytest.mark.parametrize(
    "why", ["not-all-heads", "not-admitted-there", "copies", "inflight", "draining"]
)
def test_a_destination_that_may_carry_something_else_takes_no_chain(both, why: str) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0", "d1"])
    assert b.route("b1", ("g0", False), ("g5", False)) == ["d0", "d1"]
    assert b.route("b2", ("g1", False), ("g2", True)) == [room.WAIT] * 2
    b.settle("b1")
    b.settle("b2")
    b.settle("r", [("g0", "*")])
    assert b.model.entries["g1"].dest == "d0"
    heads, dest = ["g1"], "d0"
    if why == "not-all-heads":
        heads = []
    elif why == "not-admitted-there":
        dest = "d1"
    elif why == "copies":  # a multicast copy waits for d0: it goes next
        b.model.room[room.copy_group("d0")] = 5
        b.table._r.zadd(b.table.keys.room, {room.copy_group("d0"): 5})
    elif why == "inflight":  # an ordinary message of a batch in flight to d0
        b.model.inflight[("d0", "x")] = 99_999
        b.table._r.zadd(b.table.keys.inflight, {"d0|x": 99_999})
    elif why == "draining":
        b.model.draining.add("d0")
        assert b.table.drain("d0")
    assert b.chain([(dest, heads, [("g2", 2, b.final_of("g2"))])]) == {}
    assert b.model.entries["g2"].state == room.WAITING


def test_after_an_abort_the_replay_may_chain_behind_every_group_it_forwards(both) -> None:  # type: ignore[no-untyped-def]
    """The batch that chained aborted: its groups stay admitted to the destination; the
    replay forwards them all whole and may chain more, but not with one of them left out."""
    b = both(["d0"])
    waiting_behind_an_admitted_group(b)
    assert b.chain([("d0", ["g1"], [("g2", 2, b.final_of("g2"))])]) == {"d0": ["g2"]}
    assert b.chain([("d0", ["g1"], [("g3", 1, b.final_of("g3"))])]) == {}  # g2 left out
    assert b.chain([("d0", ["g1", "g2"], [("g3", 1, b.final_of("g3"))])]) == {"d0": ["g3"]}
    assert b.model.load == {"d0": 3}


def test_a_lanes_ordinary_messages_are_chained_and_released_by_the_same_settle(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    waiting_behind_an_admitted_group(b)
    lane = room.ordinary_group("q/0")
    assert b.route("b4", (None, False), (None, False)) == [room.WAIT] * 2
    assert b.chain([("d0", ["g1"], [(lane, 2, "")])]) == {}  # their batch not committed
    b.settle("b4")
    assert b.chain([("d0", ["g1"], [(lane, 1, "")])]) == {}  # one not read
    assert b.chain([("d0", ["g1"], [(lane, 2, "")])]) == {"d0": [lane]}
    finals = [("g1", b.final_of("g1"))]
    drains = [(lane, 2, -1)]
    assert b.table.settle("d1", (), finals, drains) == b.model.settle("d1", (), finals, drains)
    b.agree()
    assert lane not in b.model.entries and b.model.entries["g2"].state == room.ADMITTED


@pytest.mark.parametrize("park_settles_first", [False, True])
def test_a_lane_parked_into_while_chained_is_not_released(both, park_settles_first: bool) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    waiting_behind_an_admitted_group(b)
    lane = room.ordinary_group("q/0")
    assert b.route("b4", (None, False), (None, False)) == [room.WAIT] * 2
    b.settle("b4")
    assert b.chain([("d0", ["g1"], [(lane, 2, "")])]) == {"d0": [lane]}
    # another unit parks a third ordinary message of the lane, after chain.lua
    assert b.route("b5", (None, False)) == [room.WAIT]
    if park_settles_first:
        b.settle("b5")
    finals, drains = [("g1", b.final_of("g1"))], [(lane, 2, -1)]
    assert b.table.settle("d1", (), finals, drains) == b.model.settle("d1", (), finals, drains)
    b.agree()
    if not park_settles_first:
        b.settle("b5")
    b.agree()
    # the lane holds d0 (its third message is still to drain): nothing else is admitted
    assert b.model.entries[lane].state == room.ADMITTED and b.model.entries[lane].dest == "d0"
    assert b.model.load == {"d0": 1} and b.model.entries["g2"].state == room.WAITING
    drains = [(lane, 3, -1)]
    assert b.table.settle("d2", (), [], drains) == b.model.settle("d2", (), [], drains)
    b.agree()
    assert lane not in b.model.entries and b.model.entries["g2"].state == room.ADMITTED
