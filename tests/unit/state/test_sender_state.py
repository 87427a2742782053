"""The pure logic of resumed groups (`router.state.sender`) and of receivers' group statuses
(`router.state.groups`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.state.groups import GroupStatus, advance
from router.state.sender import GroupRecord, TailRecord, resume

REC = GroupRecord("g", "shop.send.0", 2, "tok", scan_from=100, opened_ms=5)


def tail(*members: tuple[int, int | None, bool]) -> list[TailRecord]:
    return [TailRecord(o, s, f) for o, s, f in members]


def test_a_record_round_trips_through_its_encoding() -> None:
    r = REC.acknowledged(3, 140)
    assert GroupRecord.decode("g", r.encode()) == r
    assert (r.acked_seq, r.scan_from, r.next_seq) == (3, 141, 4)


def test_an_older_or_logical_acknowledgement_changes_nothing() -> None:
    r = REC.acknowledged(3, 140)
    assert r.acknowledged(2, 130) == r
    logical = GroupRecord("g", "t", 0, "tok", 100, logical=True)
    assert logical.acknowledged(5, 150) == logical


def test_nothing_on_the_lane_resumes_at_zero_or_after_the_acknowledged_member() -> None:
    assert resume(REC, []).next_seq == 0
    assert resume(REC.acknowledged(3, 140), []).next_seq == 4


def test_members_that_landed_unacknowledged_count() -> None:
    """A crash after Kafka appended seqs 4 and 5 but before the checkpoint: resumed at 6,
    and the scan starts after the last of them next time."""
    x = resume(REC.acknowledged(3, 140), tail((150, 4, False), (151, 5, False)))
    assert (x.finished, x.next_seq, x.gaps) == (False, 6, ())
    assert (x.record.acked_seq, x.record.scan_from, x.record.next_seq) == (5, 152, 6)


def test_a_final_on_the_lane_finishes_the_group() -> None:
    assert resume(REC, tail((120, 0, False), (121, 1, True))).finished


def test_an_earlier_group_under_the_same_id_is_not_taken_for_this_one() -> None:
    """The scan may start before this opening: the old group's members up to its final,
    then this group's seq 0 and 1."""
    old = [(100, 0, False), (105, 1, True)]
    assert resume(REC, tail(*old, (110, 0, False), (111, 1, False))).next_seq == 2
    assert not resume(REC, tail(*old, (110, 0, False))).finished


def test_members_below_scan_from_are_ignored() -> None:
    assert resume(REC, tail((90, 7, True), (100, 0, False))).next_seq == 1


def test_a_missing_member_below_the_highest_is_a_gap() -> None:
    x = resume(REC, tail((100, 0, False), (102, 2, False)))
    assert (x.next_seq, x.gaps) == (3, (1,))


def test_a_logical_group_resumes_above_every_number_sent() -> None:
    logical = GroupRecord("g", "t", 0, "tok", 100, logical=True)
    x = resume(logical, tail((100, 4, False), (101, 1, False)))
    assert (x.next_seq, x.sent, x.gaps) == (5, frozenset({1, 4}), ())


@given(
    acked=st.integers(-1, 20),
    landed=st.integers(0, 20),
)
def test_the_next_number_is_one_past_what_reached_the_lane(acked: int, landed: int) -> None:
    """Whatever was acknowledged and checkpointed (`acked`) and whatever landed after it
    (`landed` members): no number is used twice, none skipped."""
    record = REC if acked < 0 else REC.acknowledged(acked, 100 + acked)
    on_lane = [TailRecord(100 + s, s, False) for s in range(acked + 1, acked + 1 + landed)]
    x = resume(record, on_lane)
    assert x.next_seq == acked + 1 + landed
    assert x.gaps == ()


def status(offset: int, seq: int | None, final: bool = False) -> GroupStatus:
    return GroupStatus("g", "shop.recv.0", 0, offset, seq, final)


def test_a_status_advances_with_each_member_done() -> None:
    s = advance(None, "g", "shop.recv.0", 0, 10, 0, False)
    assert s == status(10, 0)
    s = advance(s, "g", "shop.recv.0", 0, 12, 1, True)
    assert s is not None and (s.last_seq, s.complete, s.done_count) == (1, True, 2)


def test_a_redelivered_member_changes_no_status() -> None:
    assert advance(status(12, 1), "g", "shop.recv.0", 0, 12, 1, False) is None
    assert advance(status(12, 1), "g", "shop.recv.0", 0, 10, 0, False) is None


def test_after_a_complete_group_the_id_starts_over() -> None:
    s = advance(status(12, 1, True), "g", "shop.recv.0", 0, 20, 0, False)
    assert s is not None and (s.last_seq, s.complete, s.done_count) == (0, False, 1)
    moved = advance(status(12, 1), "g", "shop.recv.3", 0, 5, 0, False)
    assert moved is not None and moved.queue == "shop.recv.3" and moved.done_count == 1
