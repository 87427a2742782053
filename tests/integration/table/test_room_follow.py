"""A new group complete within its batch follows its own lane's final while others wait
(`router.table.room.follow`): first come, first served stops there, because the waiting
group could not have had that destination before the batch's settle, which releases both
groups at once. The Lua table against the model, step by step, on the real Redis.
"""

from __future__ import annotations

from router.table import room
from tests.fixtures.tablepair import req


def _room_with_a_waiting_group(both):  # type: ignore[no-untyped-def]
    """d0 holds g0 and d1 holds g1 (both lane q/0, open); gw waits in the room."""
    b = both(["d0", "d1"])
    assert b.route("b1", ("g0", False), ("g1", False)) == ["d0", "d1"]
    b.settle("b1")
    assert b.route("b2", ("gw", False, "q/9")) == [room.WAIT]
    b.settle("b2")
    assert b.model.room
    return b


def test_a_group_complete_in_its_batch_follows_its_lanes_final_past_the_room(both) -> None:  # type: ignore[no-untyped-def]
    b = _room_with_a_waiting_group(both)
    assert b.route("b3", ("g0", True), ("g2", False), ("g2", True)) == ["d0"] * 3
    b.agree()
    assert b.model.entries["gw"].state == room.WAITING  # it could not have had d0 before
    # the settle releases g0 and g2 together, and the oldest waiting group takes d0 then
    b.settle("b3", [("g0", b.final_of("g0")), ("g2", b.final_of("g2"))])
    b.agree()
    assert b.model.entries["gw"].state == room.ADMITTED and b.model.entries["gw"].dest == "d0"


def test_a_group_not_complete_in_its_batch_waits_behind_the_room(both) -> None:  # type: ignore[no-untyped-def]
    b = _room_with_a_waiting_group(both)
    assert b.route("b3", ("g0", True), ("g2", False)) == ["d0", room.WAIT]
    b.agree()


def test_a_final_of_another_lane_lets_no_one_past_the_room(both) -> None:  # type: ignore[no-untyped-def]
    b = _room_with_a_waiting_group(both)
    decisions = b.route("b3", ("g0", True), ("g3", False, "q/1"), ("g3", True, "q/1"))
    assert decisions == ["d0", room.WAIT, room.WAIT]
    b.agree()


def test_a_carried_final_lets_no_one_past_the_room(both) -> None:  # type: ignore[no-untyped-def]
    """The batch in flight settles first: the waiting group has d0 from then on, so a
    group of the next batch taking it would make it wait longer."""
    b = _room_with_a_waiting_group(both)
    assert b.route("b3", ("g0", True)) == ["d0"]
    assert b.route("b4", ("g2", False), ("g2", True), after="b3") == [room.WAIT] * 2
    b.agree()


def test_one_destination_the_room_head_takes_it_at_the_settle(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g4", False)) == ["d0", room.WAIT]
    assert b.route("b2", ("g0", True), ("g2", False), ("g2", True)) == ["d0"] * 3
    b.settle("b2", [("g0", b.final_of("g0")), ("g2", b.final_of("g2"))])
    b.agree()
    assert b.model.entries["g4"].state == room.ADMITTED


def test_logical_order_groups_do_not_follow(both) -> None:  # type: ignore[no-untyped-def]
    """A final in logical order may come before other members: complete is not known."""
    b = _room_with_a_waiting_group(both)
    g0 = req("g0", True, "q/0", n=100)
    first = req("g5", False, "q/0", n=101)
    first.seq = 0
    last = req("g5", True, "q/0", n=102)
    last.seq = 1
    expected = b.model.route([g0, first, last], 1_000, "b3", 3_000)
    got = b.table.route([g0, first, last], now_ms=1_000, batch="b3")
    assert got == expected
    assert expected.decisions[0] == "d0" and expected.decisions[1] == room.WAIT
    b.agree()
