"""The table fences a unit that lost its partition (`router/table/store/owners.py`): a zombie
(resumed after its consumer session ended) calls the route and chain scripts with the claim it
took at its assignment; the new owner's claim is newer, and the zombie's calls change nothing.
Against the real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from router.table import room
from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable, TableKeys
from router.table.store.owners import LaneFenced
from tests.fixtures.helpers import table_snapshot as snapshot
from tests.fixtures.helpers import unique

LANE = "send.q/0"


@pytest.fixture
def units(redis_client: redis.Redis) -> Iterator[tuple[ManagementTable, ManagementTable]]:
    keys = TableKeys.of(unique("fence"), "t", "send")
    old, new = (ManagementTable(redis_client, keys, ["d0", "d1"], policy="wait") for _ in "ab")
    yield old, new
    old.drop()


def req(gid: str, offset: int, final: bool = False, lane: str = LANE) -> RouteRequest:
    return RouteRequest(gid, final, 60_000, f"{lane}/{offset}", lane)


def test_a_zombies_route_call_is_refused_and_changes_nothing(
    units: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    zombie, owner = units
    zombie.claim([LANE])
    assert zombie.route([req("G1", 1)], batch="z1").decisions == ["d0"]
    # The zombie freezes; its partition moves to the new owner, which claims it, replays
    # G1's message and routes its final.
    owner.claim([LANE])
    assert int(owner.claims[LANE]) > int(zombie.claims[LANE])
    assert owner.owners() == {LANE: owner.claims[LANE]}
    owner.settle("z1", ["d0"])  # the zombie's batch never settles: the lease ends (here, now)
    owner.route([req("G1", 1), req("G1", 2, final=True)], batch="n1")
    owner.settle("n1", [], [("G1", f"{LANE}/2")])
    assert owner.entries() == {}
    before = snapshot(redis_client, owner.keys)
    # The zombie resumes with its stale batch: G1 again, and a group that wants to wait.
    with pytest.raises(LaneFenced) as caught:
        zombie.route([req("G1", 1), req("G2", 3)], batch="z2")
    assert caught.value.lane == LANE
    assert snapshot(redis_client, owner.keys) == before, "a fenced call wrote"
    assert owner.entries() == {}
    # The owner goes on; a call for another lane of the zombie's is not fenced by this one.
    assert owner.route([req("G3", 4)], batch="n2").decisions[0] in {"d0", "d1"}
    zombie.claim(["send.q/1"])
    assert zombie.route([req("G4", 1, lane="send.q/1")], batch="z3").decisions[0] in {"d0", "d1"}
    assert set(owner.entries()) == {"G3", "G4"}


def test_a_zombies_chained_drain_is_refused(
    units: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    zombie, owner = units
    room_lane = "room/0"
    zombie.claim([room_lane])
    # g0 holds d0 and d1 holds g9; g1 waits behind them, g2 (complete) too; g0 ends: g1 admitted.
    owner.route([req("g0", 1), req("g9", 2)], batch="b1")
    owner.route([req("g1", 3), req("g2", 4), req("g2", 5, final=True)], batch="b2")
    owner.settle("b1", [])
    owner.settle("b2", [])
    owner.settle("r", [], [("g0", "*")])
    assert owner.admitted() == {"g1": "d0"} and "g2" in owner.room()
    owner.claim([room_lane])
    plan = [("d0", ["g1"], [("g2", 2, f"{LANE}/5")])]
    before = snapshot(redis_client, owner.keys)
    with pytest.raises(LaneFenced):
        zombie.chain(plan, [room_lane])
    assert snapshot(redis_client, owner.keys) == before
    assert owner.chain(plan, [room_lane]) == {"d0": ["g2"]}
    assert owner.entries()["g2"].state == room.ADMITTED


def test_a_lost_claim_is_taken_by_the_next_call_and_fences_again(
    units: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    zombie, owner = units
    zombie.claim([LANE])
    owner.claim([LANE])
    redis_client.delete(owner.keys.owners)  # Redis came back without the claims
    zombie.route([req("G1", 1)], batch="z1")  # nobody can tell: accepted, its token kept
    assert owner.owners() == {LANE: zombie.claims[LANE]}
    owner.route([req("G2", 2)], batch="n1")  # the newer claim wins from here on
    assert owner.owners() == {LANE: owner.claims[LANE]}
    with pytest.raises(LaneFenced):
        zombie.route([req("G3", 3)], batch="z2")


def test_callers_without_claims_are_not_fenced(
    units: tuple[ManagementTable, ManagementTable],
) -> None:
    tool, owner = units
    owner.claim([LANE])
    assert tool.route([req("G1", 1)], batch="t1").decisions == ["d0"]
    owner.disclaim([LANE])
    assert owner.unclaimed([LANE]) == {LANE}
    assert owner.route([req("G1", 2, final=True)], batch="n1").decisions == ["d0"]
