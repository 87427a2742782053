"""Logical order on the pure waiting-room harness (model table, real emit and drain
steps, fake room log): members from several lanes in shuffled order go out in sequence;
a replay of an aborted batch is not taken for a duplicate; and `router.unit.steps.drain.sequence`'s
plan."""

from __future__ import annotations

from typing import Any

from router import contract
from router.unit.steps.drain import sequence
from router.unit.steps.drain.index import Parked
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.roomharness import Side

LOGICAL = [(contract.ORDER, b"logical")]


def member(offset: int, gid: str, seq: int, partition: int, final: bool = False) -> FakeMessage:
    value = f"{gid}{seq}".encode()
    return msg(offset, gid, seq=seq, final=final, partition=partition, value=value, extra=LOGICAL)


def values(side: Side) -> list[bytes]:
    return [v for _, v in side.delivered]


def test_members_from_three_lanes_in_shuffled_order_are_forwarded_in_sequence() -> None:
    side = Side(["0", "1"])
    side.route(1, member(0, "G", 0, 0))  # straight
    side.route(2, member(0, "G", 3, 1), member(1, "G", 4, 1, final=True))  # ahead: parked
    side.route(3, member(0, "G", 2, 2))
    side.run_drain(4)
    assert values(side) == [b"G0"], "2, 3, 4 wait for 1"
    side.route(5, member(1, "G", 1, 0))  # the group's own lane, but it is in the room now
    side.run_drain(6)
    side.run_drain(7)
    assert values(side) == [b"G0", b"G1", b"G2", b"G3", b"G4"]
    assert {d for d, _ in side.delivered} == {side.delivered[0][0]}, "one destination"
    assert "G" not in side.model.entries, "released after its final"


def test_a_duplicate_is_dead_lettered_and_a_gap_waits() -> None:
    side = Side(["0"])
    side.route(1, member(0, "G", 0, 0), member(1, "G", 1, 0))
    side.route(2, member(0, "G", 1, 1))  # a retry of 1 from another lane
    side.route(3, member(0, "G", 3, 2))  # 2 is missing
    side.run_drain(4)
    side.run_drain(5)
    assert values(side) == [b"G0", b"G1"]
    assert [r for _, r in side.dead] == [b"duplicate-seq"]
    side.route(6, member(2, "G", 2, 0, final=False))
    side.run_drain(7)
    side.run_drain(8)
    assert values(side) == [b"G0", b"G1", b"G2", b"G3"]


def test_a_replay_of_an_aborted_straight_batch_is_delivered_not_dropped() -> None:
    """Lane 0 routes 1 and 2 straight in a batch whose transaction aborts; meanwhile 3
    from lane 1 puts the group in the room. The replay of 1 and 2 is parked: it is below
    the table's next number but at or before the fence, so it is a replay, not a
    duplicate."""
    side = Side(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(1, "G", 1, 0), member(2, "G", 2, 0), commit=False)  # aborted
    side.route(3, member(0, "G", 3, 1, final=True))
    side.run_drain(4)
    assert values(side) == [b"G0"], "the fence's batch is not settled: nothing drained"
    side.route(5, member(1, "G", 1, 0), member(2, "G", 2, 0))  # the replay, parked
    side.run_drain(6)
    side.run_drain(7)
    assert values(side) == [b"G0", b"G1", b"G2", b"G3"]
    assert side.dead == []


def parked(offset: int, seq: int | None, token: str = "q/0/0") -> Parked:
    return Parked(msg(offset, "G", seq=seq), False, token, seq=seq)


def seqs(ps: list[Parked]) -> list[Any]:
    return [p.seq for p in ps]


def test_plan_forwards_the_run_and_keeps_the_rest_waiting() -> None:
    plan = sequence.plan([parked(0, 4), parked(1, 2), parked(2, 3), parked(3, 2), parked(4, 1)], 2)
    assert seqs(plan.forward) == [2, 3, 4] and plan.next == 5
    assert seqs(plan.duplicates) == [1, 2] and plan.waiting == []
    assert plan.through == 4


def test_plan_with_a_gap_waits_and_skipping_it_goes_past() -> None:
    ps = [parked(0, 5), parked(1, 3), parked(2, None), parked(3, 5)]
    plan = sequence.plan(ps, 2)
    assert plan.forward == [] and plan.gap == (2, 3)
    assert seqs(plan.waiting) == [3, 5, 5], "a copy of a waiting member waits with it"
    assert seqs(plan.unsequenced) == [None] and plan.through == 2
    skipped = sequence.plan(ps, 2, skip_gap=True)
    assert seqs(skipped.forward) == [3, 5] and skipped.next == 6 and skipped.gap is None
    assert seqs(skipped.duplicates) == [5], "the copy of 5"


def test_start_goes_back_for_replays_at_or_before_the_fence() -> None:
    ps = [parked(0, 3, "q/0/7"), parked(1, 4, "q/0/9"), parked(2, 6, "q/1/2")]
    assert sequence.start(ps, 5, -1, "q/0/8") == 3
    assert sequence.start(ps, 5, 6, "") == 6
    assert sequence.start(ps, 5, -1, "q/2/100") == 5
