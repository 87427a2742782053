"""Finals carried into the next batch (`ManagementTable.route(carried=..., earlier=...)`): a
unit decides its next batch while the previous one commits (`unit.overlap_commit`); that
batch's finals land first, so their destinations are free for the next batch as they would
be later in the same batch. The Lua table against the model, step by step, on the real Redis.
"""

from __future__ import annotations

from router.table import room
from router.table.routing import HELD
from router.table.store import management


def test_a_new_group_follows_the_final_of_its_lane_routed_in_the_batch_in_flight(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g0", True)) == ["d0"] * 2
    # b1 is not settled yet (g0 still holds d0): b2 is written after b1's commit
    assert b.route("b2", ("g1", False), ("g1", True), ("g2", False), after="b1") == ["d0"] * 3
    b.agree()
    assert b.model.load == {"d0": 3} and not b.model.room


def test_without_the_batch_in_flight_the_new_group_waits(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g0", True)) == ["d0"] * 2
    assert b.route("b2", ("g1", False)) == [room.WAIT]
    b.agree()


def test_a_final_of_another_lane_frees_nothing_for_a_new_group(both) -> None:  # type: ignore[no-untyped-def]
    """A replay of the two lanes could put the new group's first message before the
    other lane's final: only the new group's own lane keeps its order."""
    b = both(["d0"])
    assert b.route("b1", ("g0", False, "q/1"), ("g0", True, "q/1")) == ["d0"] * 2
    assert b.route("b2", ("g1", False), (None, False), after="b1") == [room.WAIT, "d0"]
    b.agree()  # an ordinary message has no order to keep: it may follow any final


def test_a_group_released_already_is_not_freed_twice(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g0", True)) == ["d0"] * 2
    b.settle("b1", [("g0", b.final_of("g0"))])  # committed and released before b2 is routed
    assert b.route("b2", ("g1", False), ("g2", False), after="b1") == ["d0", room.WAIT]
    b.agree()


def test_the_batch_in_flight_fences_nothing_for_the_next(both) -> None:  # type: ignore[no-untyped-def]
    """b1's ordinary messages on d1 land before b2's records: a new group may start there;
    another unit's batch still fences it."""
    b = both(["d0", "d1"])
    assert b.route("b1", ("g0", False), (None, False)) == ["d0", "d1"]
    assert b.route("b2", ("g1", False), after="b1") == ["d1"]
    b.agree()
    c = both(["d0", "d1"])
    assert c.route("b1", ("g0", False), (None, False)) == ["d0", "d1"]
    assert c.route("b2", ("g1", False)) == [room.WAIT]
    c.agree()


def test_an_id_reused_after_a_carried_final_waits_for_its_release(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g0", True)) == ["d0"] * 2
    assert b.route("b2", ("g1", False), ("g0", False), after="b1") == ["d0", HELD]
    b.agree()


def test_a_chunked_batch_carries_its_earlier_chunks_finals(both, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One batch routed in several calls (`CALL_REQUESTS`): a call sees the finals of the
    calls before it, as one call would."""
    monkeypatch.setattr(management, "CALL_REQUESTS", 2)
    b = both(["d0"])
    assert b.table.chunk_size == 2
    requests = [
        ("g0", False),
        ("g0", True),
        ("g1", False),
        ("g1", True),
        ("g2", False),
    ]
    assert b.route("b1", *requests) == ["d0"] * 5
    b.agree()
