"""A new group prefers a destination a final of its own lane freed in the batch
(`router.table.choice.choose`), so that a lane's groups that follow each other leave the
other destinations clean for other lanes. The Lua table against the model, step by step,
on the real Redis."""

from __future__ import annotations

from router.table import room


def test_a_lanes_next_group_reuses_its_freed_destination_not_the_next_clean_one(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0", "d1", "d2"])
    # the cursor stands after d0 once g0 took it; g1 still takes d0, freed by g0's final
    assert b.route("b1", ("g0", False), ("g0", True), ("g1", False), ("g1", True)) == ["d0"] * 4
    b.agree()
    assert b.model.load == {"d0": 2}  # d1 and d2 stay clean for the other lanes


def test_the_other_lanes_of_the_next_batch_find_clean_destinations(both) -> None:  # type: ignore[no-untyped-def]
    """While b1 commits, its lane's closed groups hold d0 only: b2's other lane starts
    straight on a clean destination instead of waiting."""
    b = both(["d0", "d1"])
    first = [("g0", False), ("g0", True), ("g1", False), ("g1", True), ("g2", False), ("g2", True)]
    assert b.route("b1", *first) == ["d0"] * 6
    assert b.route("b2", ("h0", False, "q/1"), ("h0", True, "q/1"), after="b1") == ["d1"] * 2
    b.agree()
    assert not b.model.room


def test_a_carried_final_is_reused_too(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0", "d1"])
    assert b.route("b1", ("g0", False), ("g0", True)) == ["d0"] * 2
    assert b.route("b2", ("g1", False), after="b1") == ["d0"]
    b.agree()


def test_without_a_freed_destination_the_cursor_decides(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0", "d1"])
    assert b.route("b1", ("g0", False), ("g1", False)) == ["d0", "d1"]
    assert b.route("b2", ("g2", False)) == [room.WAIT]
    b.agree()
