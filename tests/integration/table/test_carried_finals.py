"""Finals carried into the next batch (`ManagementTable.route(carried=..., earlier=...)`): a
unit decides its next batch while the previous one commits (`unit.overlap_commit`); that
batch's finals land first, so their destinations are free for the next batch as they would
be later in the same batch. The Lua table against the model, step by step, on the real Redis.
"""

from __future__ import annotations

from router.table import room
from router.table.routing import HELD
from router.table.store import routecalls
from tests.fixtures.tablepair import req


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
    monkeypatch.setattr(routecalls, "CALL_REQUESTS", 2)
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


def _again(b, batch: str, msgs: list[tuple[str | None, bool, int]], after: str = ""):  # type: ignore[no-untyped-def]
    """Route (gid, final, offset) on lane q/0 at the given offsets: a replay of messages
    routed before (the same tokens), in lockstep; `after` as in `Both.route`."""
    requests = [req(gid, final, n=n) for gid, final, n in msgs]
    earlier = [after] if after else []
    carried = b.finals.get(after, [])
    expected = b.model.route(requests, 1_000, batch, 3_000, None, carried, earlier)
    got = b.table.route(requests, now_ms=1_000, batch=batch, carried=carried, earlier=earlier)
    assert got == expected
    b.finals[batch] = [
        (r.guarantee_id, r.token)
        for r, d in zip(requests, expected.decisions, strict=True)
        if r.final and r.guarantee_id is not None and d in b.model.destinations
    ]
    return expected.decisions


def _one_destination_each(b) -> None:  # type: ignore[no-untyped-def]
    """Every open group on one destination, and each destination's load its open groups."""
    load: dict[str, int] = {}
    for e in b.model.entries.values():
        if e.dest in b.model.destinations:
            load[e.dest] = load.get(e.dest, 0) + 1
    assert {d: n for d, n in b.model.load.items() if n} == load


def test_the_batch_in_flight_aborted_the_next_one_discarded_a_replay_keeps_the_lane_order(
    both,
) -> None:  # type: ignore[no-untyped-def]
    """b1 fails after b2 put g1 on d1, which b1's final freed: the unit never produces b2
    (stale), both are replayed from b1's offsets. g1's entry survives on d1 beside g0's
    (still closing on the final that never landed); the replay writes g0 whole, then g1,
    on d1 (one lane, in order), and only g0's final releases anything."""
    b = both(["d0", "d1"])
    assert b.route("x0", ("gx", False, "q/9")) == ["d0"]  # d0 busy: another lane's group
    assert _again(b, "b1", [("g0", False, 1), ("g0", True, 2)]) == ["d1"] * 2
    assert _again(b, "b2", [("g1", False, 3), ("g1", False, 4)], after="b1") == ["d1"] * 2
    b.agree()
    _one_destination_each(b)
    assert b.model.load == {"d0": 1, "d1": 2}
    # b1 aborted, b2 discarded: nothing settled. Replayed in one batch, then in two.
    msgs = [("g0", False, 1), ("g0", True, 2), ("g1", False, 3), ("g1", False, 4)]
    assert _again(b, "b3", msgs) == ["d1"] * 4
    assert _again(b, "b4", msgs[:2]) == ["d1"] * 2
    assert _again(b, "b5", msgs[2:], after="b4") == ["d1"] * 2
    b.settle("b4", [("g0", b.final_of("g0"))])
    b.agree()
    _one_destination_each(b)
    assert b.model.load == {"d0": 1, "d1": 1} and b.model.entries["g1"].dest == "d1"


def test_a_carried_final_whose_group_was_reopened_since_frees_nothing(both) -> None:  # type: ignore[no-untyped-def]
    """The ID reused after b1's final by another batch (another unit's, the partition
    taken over): the entry is no longer closing on the carried token, so g1 waits."""
    b = both(["d0"])
    assert _again(b, "b1", [("g0", False, 1), ("g0", True, 2)]) == ["d0"] * 2
    assert _again(b, "x1", [("g0", False, 10)]) == ["d0"]  # the ID reused: g0 goes on
    assert b.model.entries["g0"].closing == ""
    assert _again(b, "b2", [("g1", False, 3)], after="b1") == [room.WAIT]
    b.agree()
    _one_destination_each(b)


def test_a_carried_final_whose_group_was_released_and_begun_again_frees_nothing(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    assert _again(b, "b1", [("g0", False, 1), ("g0", True, 2)]) == ["d0"] * 2
    b.settle("b1", [("g0", b.final_of("g0"))])
    assert _again(b, "x1", [("g0", False, 10)]) == ["d0"]  # a new group of the same ID
    assert _again(b, "b2", [("g1", False, 3)], after="b1") == [room.WAIT]
    b.agree()
    _one_destination_each(b)
    assert b.model.load == {"d0": 1}


def test_a_final_released_between_the_chunks_of_the_next_batch_is_not_freed_twice(both) -> None:  # type: ignore[no-untyped-def]
    """b1 commits and releases g0 while b2 is routed chunk by chunk (two calls): b2's
    first chunk put g1 on d0 through the carried final, its next chunk still carries it
    but finds it released, and takes d0 for no second group."""
    b = both(["d0"])
    assert _again(b, "b1", [("g0", False, 1), ("g0", True, 2)]) == ["d0"] * 2
    assert _again(b, "b2", [("g1", False, 3)], after="b1") == ["d0"]
    b.settle("b1", [("g0", b.final_of("g0"))])
    assert _again(b, "b2", [("g2", False, 4)], after="b1") == [room.WAIT]
    b.agree()
    _one_destination_each(b)
    assert b.model.load == {"d0": 1}
