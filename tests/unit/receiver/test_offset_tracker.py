"""The receiver's commit offsets (pure): never past a message received but not done."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.receiver import OffsetTracker

TP = ("q", 0)


def test_the_commit_offset_waits_for_the_lowest_message_not_done() -> None:
    t = OffsetTracker()
    for offset in (5, 6, 7):
        t.received(TP, offset)
    assert t.done(TP, 7) is None  # 5 and 6 are still being processed
    assert t.done(TP, 5) == 6
    assert t.done(TP, 6) == 8  # all done: one past the highest received
    assert t.done(TP, 6) is None  # twice: nothing moves


def test_a_revoked_partition_is_forgotten() -> None:
    t = OffsetTracker()
    t.received(TP, 1)
    t.forget(TP)
    assert t.done(TP, 1) is None


@given(st.permutations(list(range(12))))
def test_any_order_of_done_never_commits_past_an_unfinished_message(order: list[int]) -> None:
    t = OffsetTracker()
    for offset in range(12):
        t.received(TP, offset)
    finished: set[int] = set()
    committed = 0
    for offset in order:
        finished.add(offset)
        moved = t.done(TP, offset)
        if moved is not None:
            assert moved > committed
            committed = moved
        assert all(o in finished for o in range(committed))  # nothing skipped
        lowest_open = min(set(range(12)) - finished, default=12)
        assert committed == lowest_open  # and nothing held back needlessly
