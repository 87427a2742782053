"""A replayed park is not counted again (`router.table.room.replayed`), unless its group is
admitted (then a drain check's count must see it): the batch that first parked the record
aborted, and its park was counted then. A drain check that read
the group's park count before the replay, and that completes in the very batch that parks
the replay, must not open (or release) the group: the replayed record is in the room
after the check's end offset, and would be dead-lettered as `group-entry-missing` (a
lane's ordinary messages) or `room-late` (a group). The batch's own park leases therefore
still count when its drains settle. The Lua table against the model, on the real Redis.
"""

from __future__ import annotations

import pytest
import redis

from router.table import room
from router.table.model import TableModel
from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable, TableKeys
from tests.fixtures.helpers import unique


def _req(gid: str | None, offset: int, lane: str = "q/1", final: bool = False) -> RouteRequest:
    return RouteRequest(gid, final, 60_000, f"{lane}/{offset}", lane)


@pytest.mark.parametrize("pseudo", [True, False], ids=["lane-ordinary", "group"])
def test_a_drain_settled_with_a_replayed_park_keeps_the_group_admitted(
    redis_url: str, pseudo: bool
) -> None:
    client = redis.Redis.from_url(redis_url)
    dests = ["d0"]
    model = TableModel(dests, policy="wait")
    table = ManagementTable(
        client, TableKeys.of(unique("replay"), "t", "send"), dests, "wait", 3_000
    )
    try:

        def both_route(batch: str, now: int, *reqs: RouteRequest) -> list[str]:
            want = model.route(list(reqs), now, batch, 3_000)
            got = table.route(list(reqs), now_ms=now, batch=batch)
            assert got == want
            return want.decisions

        def both_settle(batch: str, finals=(), drains=()) -> None:  # type: ignore[no-untyped-def]
            assert table.settle(batch, (), finals, drains) == model.settle(
                batch, (), finals, drains
            )

        gid = room.ordinary_group("q/1") if pseudo else "g1"
        member = None if pseudo else "g1"
        assert both_route("b0", 1_000, _req("g0", 1, "q/0")) == ["d0"]  # d0 busy with g0
        both_settle("b0")
        assert both_route("b1", 1_000, _req(member, 1)) == [room.WAIT]  # parked, counted
        both_settle("b1")
        # b2 parks the next record (counted) and its unit dies before producing it
        assert both_route("b2", 1_000, _req(member, 2)) == [room.WAIT]
        assert model.entries[gid].parks == 2
        # g0 ends; b2's park lease ends (later route); the waiting group is admitted to d0
        both_settle("b0x", finals=[("g0", model.entries["g0"].closing)])
        assert both_route("b3", 10_000, _req(None, 9, "q/9")) in (["d0"], [room.WAIT])
        both_settle("b3")
        assert model.entries[gid].state == room.ADMITTED
        # the drain checks the room: 2 parks counted, the room holds record 1 only
        # b4 replays b2's record and completes that drain check; the group being admitted,
        # the replay counts (room.py `park`): no drain check made before it passes
        assert both_route("b4", 10_000, _req(member, 2)) == [room.WAIT]
        assert model.entries[gid].parks == 3
        both_settle("b4", drains=[(gid, 2)])
        assert table.entries() == model.entries
        # record 2 is in the room, after the check: the group must still be the room's
        assert model.entries[gid].state == room.ADMITTED
    finally:
        table.drop()


def test_a_replayed_forced_reuse_of_a_whole_group_answers_unstaged_again_in_lua(
    redis_url: str,
) -> None:
    """The ID reused after a whole group's final, forced to join it, answers UNSTAGED (its
    GroupStagingAborted event rides in the batch); the replay of that batch after an abort
    answers UNSTAGED again, on the real Lua as in the model (found by the property test)."""
    client = redis.Redis.from_url(redis_url)
    dests = ["d0"]
    model = TableModel(dests, policy="wait", max_staged=2)
    table = ManagementTable(
        client, TableKeys.of(unique("reuse"), "t", "send"), dests, "wait:2", 3_000
    )
    n = 0

    def msg(gid: str | None, final: bool = False) -> RouteRequest:
        nonlocal n
        n += 1
        r = RouteRequest(gid, final, 1_000, f"q1/0/{n}", "q1/0", force_share=True)
        r.complete = gid is not None
        return r

    try:

        def both_route(batch: str, reqs: list[RouteRequest]) -> list[str]:
            want = model.route(reqs, 0, batch, 3_000)
            got = table.route(reqs, now_ms=0, batch=batch)
            assert got == want
            return want.decisions

        first = [msg(None) for _ in range(10)] + [msg("g0", final=True)]
        assert both_route("b1", first)[-1] == room.WAIT
        assert table.settle("b1", ["d0"], (), ()) == model.settle("b1", ["d0"], (), ())
        batch = [msg(None) for _ in range(5)] + [msg("g0")]  # reused, forced: it joins
        assert both_route("b2", batch)[-1] == room.UNSTAGED
        assert both_route("b3", batch)[-1] == room.UNSTAGED  # b2 aborted: its replay
        assert table.entries() == model.entries
    finally:
        table.drop()
