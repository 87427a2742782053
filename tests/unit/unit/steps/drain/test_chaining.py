"""Which waiting groups a drain batch asks to chain behind the groups it forwards whole
(`router.unit.steps.drain.chaining`, pure)."""

from __future__ import annotations

from router.table import room
from router.table.routing import STOPPED, RoomState
from router.unit.steps.drain import chaining
from router.unit.steps.drain.index import Parked
from tests.fixtures.fakes import msg

TP0, TP1 = ("room", 0), ("room", 1)


def group(gid: str, n: int, final: bool = True, at: int = 0) -> list[Parked]:
    """n parked records of `gid` from offset `at`, the last one final if asked (a lane's
    ordinary messages, `gid` its pseudo-group, carry no guarantee ID)."""
    sent = None if room.is_pseudo(gid) else gid
    return [Parked(msg(at + i, sent), final and i == n - 1, f"q/0/{at + i}") for i in range(n)]


def waiting(parked: list[Parked], leased: bool = False, next_seq: int = -1) -> RoomState:
    closing = parked[-1].token if parked[-1].final else ""
    return RoomState(room.WAITING, "!", closing, len(parked), leased, next_seq)


def test_lanes_first_then_groups_held_whole_oldest_first() -> None:
    lane = room.ordinary_group("q/0")
    groups = {
        "old": group("old", 2, at=0),
        "open": group("open", 2, final=False, at=10),  # no final held: not whole
        lane: group(lane, 3, final=False, at=20),
        "young": group("young", 1, at=30),
        "busy": group("busy", 1, at=40),  # a park of it in flight
        "seq": group("seq", 1, at=50),  # logical order: never chained
    }
    states = {g: waiting(p) for g, p in groups.items()}
    states["busy"] = waiting(groups["busy"], leased=True)
    states["seq"] = waiting(groups["seq"], next_seq=0)
    out = chaining.plan({"d0": [(TP0, "h")]}, {TP0: groups}, states)
    assert out == [
        (
            "d0",
            ["h"],
            [(lane, 3, ""), ("old", 2, "q/0/1"), ("young", 1, "q/0/30")],
        )
    ]


def test_a_final_that_is_not_the_tables_closing_mark_or_a_stopped_group_is_not_whole() -> None:
    parked = group("g", 2)
    other = RoomState(room.WAITING, "!", "q/0/99", 2, False)
    stopped = RoomState(room.WAITING, "!", STOPPED, 2, False)
    assert chaining.whole("g", parked, waiting(parked))
    assert not chaining.whole("g", parked, other)
    assert not chaining.whole("g", parked, stopped)


def test_only_the_heads_partition_and_shared_between_its_destinations() -> None:
    groups = {f"g{i}": group(f"g{i}", 1, at=i) for i in range(5)}
    elsewhere = {"x": group("x", 1)}
    states = {g: waiting(p) for g, p in {**groups, **elsewhere}.items()}
    heads = {"d0": [(TP0, "h0")], "d1": [(TP0, "h1")], "d2": [(TP0, "a"), (TP1, "b")]}
    out = chaining.plan(heads, {TP0: groups, TP1: elsewhere}, states)
    # d2's heads span two partitions: nothing follows them; x is on another partition
    assert [(d, [c[0] for c in cands]) for d, _, cands in out] == [
        ("d0", ["g0", "g2", "g4"]),
        ("d1", ["g1", "g3"]),
    ]


def test_a_chain_stays_within_its_bounds() -> None:
    big = chaining.CHAIN_RECORDS // 2 + 1
    groups = {"a": group("a", big, at=0), "b": group("b", big, at=10_000)}
    groups |= {f"s{i}": group(f"s{i}", 1, at=20_000 + i) for i in range(chaining.CHAIN_GROUPS + 5)}
    states = {g: waiting(p) for g, p in groups.items()}
    ((_, _, cands),) = chaining.plan({"d0": [(TP0, "h")]}, {TP0: groups}, states)
    assert len(cands) == chaining.CHAIN_GROUPS
    assert sum(n for _, n, _ in cands) <= chaining.CHAIN_RECORDS
    assert [c[0] for c in cands[:2]] == ["a", "s0"]  # b does not fit beside a


def admitted(parked: list[Parked], dest: str, parks: int | None = None) -> RoomState:
    """Admitted to `dest`, the table counting `parks` (more than held: drained in part)."""
    closing = parked[-1].token if parked[-1].final else ""
    n = len(parked) if parks is None else parks
    return RoomState(room.ADMITTED, dest, closing, n, False)


def test_an_aborted_chains_head_drained_in_part_goes_first_whole() -> None:
    """Index order after a rebuild: the chained ones, then the head's rest (its marker took
    it out of the index). The head, drained in part, goes first; elsewhere nothing moves."""
    lane = room.ordinary_group("q/0")
    groups = {
        lane: group(lane, 2, final=False, at=0),
        "c": group("c", 2, at=10),
        "other": group("other", 1, final=False, at=15),
        "head": group("head", 3, at=20),
    }
    states = {
        lane: admitted(groups[lane], "d0"),
        "c": admitted(groups["c"], "d0"),
        "other": admitted(groups["other"], "d1"),
        "head": admitted(groups["head"], "d0", parks=9),  # 6 of its records forwarded
    }
    order, held, unsure = chaining.replay_order(groups, states)
    assert (order, held, unsure) == (["head", lane, "c", "other"], set(), [])


def test_nothing_else_goes_to_the_heads_destination_while_it_cannot_go_whole() -> None:
    groups = {"c": group("c", 2, at=0), "head": group("head", 2, final=False, at=10)}
    states = {"c": admitted(groups["c"], "d0"), "head": admitted(groups["head"], "d0", parks=5)}
    order, held, unsure = chaining.replay_order(groups, states)
    assert (order, held, unsure) == (["head", "c"], {"c"}, [])


def test_a_chain_whose_head_was_never_drained_keeps_the_index_order() -> None:
    """Every group whole, none drained before: any order writes each one whole."""
    groups = {"c": group("c", 2, at=0), "head": group("head", 2, at=10)}
    states = {g: admitted(p, "d0") for g, p in groups.items()}
    assert chaining.replay_order(groups, states) == (["c", "head"], set(), [])


def test_two_groups_drained_in_part_on_one_destination_hold_it() -> None:
    """Cannot happen by the table's rules (one group streams to a destination at a time);
    if it does, which one is on the destination is unknown: nothing goes there."""
    groups = {"a": group("a", 2, at=0), "b": group("b", 2, at=10), "x": group("x", 1, at=20)}
    states = {
        "a": admitted(groups["a"], "d0", parks=3),
        "b": admitted(groups["b"], "d0", parks=4),
        "x": admitted(groups["x"], "d1"),
    }
    order, held, unsure = chaining.replay_order(groups, states)
    assert (held, unsure) == ({"a", "b"}, ["d0"])
    assert order == ["a", "b", "x"]
