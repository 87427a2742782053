"""An ID reused while its old group is not the only one in charge of its destination
(`router.table.room.crowds`): under `wait` the new group must not open beside another open
group. The Lua table against the model, step by step, on the real Redis."""

from __future__ import annotations

from router.table import room
from router.table.routing import HELD, RouteRequest


def test_an_id_reused_beside_another_open_group_waits_for_its_release(both) -> None:  # type: ignore[no-untyped-def]
    """b1's settle is lost (its unit died after the commit): g0 stays open and closing on
    d0 while b2 opens g2 there. Reusing g0 straight to d0 would open g0's new group inside
    g2's span."""
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g0", True)) == ["d0"] * 2
    assert b.route("b2", ("g1", False), ("g1", True), ("g2", False), after="b1") == ["d0"] * 3
    assert b.route("b3", ("g0", False), (None, False), after="b2") == [HELD, "!s"]
    b.agree()
    b.settle("b1", [("g0", b.final_of("g0"))])  # the sweeper releases it at last
    # a new group now, which waits for d0 like any other (g2 is open there)
    assert b.route("b4", ("g0", False), after="b2") == [room.WAIT]
    b.agree()


def test_two_ids_reused_on_one_destination_do_not_open_together(both) -> None:  # type: ignore[no-untyped-def]
    """A chain's groups left open on one destination (its settle lost): the first reused
    ID may take it only once it is the last of them, never two at once."""
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g0", True)) == ["d0"] * 2
    assert b.route("b2", ("g1", False), ("g1", True), after="b1") == ["d0"] * 2
    assert b.model.load == {"d0": 2}  # neither settled
    assert b.route("b3", ("g0", False), ("g1", False)) == [HELD, "!s"]
    b.settle("b1", [("g0", b.final_of("g0"))])
    # g0 a new group, which waits; g1 alone on d0 now takes its reused ID straight
    assert b.route("b4", ("g0", False), ("g1", False)) == [room.WAIT, "d0"]
    b.agree()


def test_the_only_group_on_its_destination_takes_its_reused_id_straight(both) -> None:  # type: ignore[no-untyped-def]
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g0", True)) == ["d0"] * 2
    assert b.route("b2", ("g0", False)) == ["d0"]  # nothing else on d0: no interleaving
    b.agree()


def test_an_id_reused_beside_the_group_that_followed_its_final_waits(both) -> None:  # type: ignore[no-untyped-def]
    """No crash needed: g1 follows g0's final onto d0 in b1; b2, decided while b1 commits
    (b1's finals carried), reuses g0. Straight to d0, g0's new group opened inside g1's
    span (before 2026-12-01); it waits for g0's release now."""
    b = both(["d0"])
    assert b.route("b1", ("g0", False), ("g0", True), ("g1", False)) == ["d0"] * 3
    assert b.route("b2", ("g0", False), ("g1", False), after="b1") == [HELD, "!s"]
    b.agree()


def test_a_logical_group_reused_with_seq_0_beside_another_open_group_waits(both) -> None:  # type: ignore[no-untyped-def]
    """The same in logical order: a first member (seq 0) under the ID of a group whose
    final was routed is the ID reused (a review found it went straight, 2026-12-01)."""
    b = both(["d0"])

    def r(gid: str, seq: int | None = None, final: bool = False) -> RouteRequest:
        n = b.next_offset()
        return RouteRequest(gid, final, 60_000, f"q/0/{n}", "q/0", continuation=bool(seq), seq=seq)

    # g1 (lane order) follows g0's final onto d0
    assert b.route_requests("b1", [r("g0", 0), r("g0", 1, final=True), r("g1")]) == ["d0"] * 3
    assert b.route_requests("b2", [r("g0", 0)], after="b1") == [HELD]
    b.agree()
