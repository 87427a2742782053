"""Attacks on the zombie fence (`router/table/store/owners.py`, `router/unit/steps/ownership.py`),
against the real Redis: what a unit's claims do when the claim is taken late (a lazy claim after
Redis refused the one at the assignment; an assignment callback run after a freeze), a fenced
call over several lanes, chunked route calls carrying claims, a claim of many lanes at once,
and a zombie's late settle (its drains fenced by its room lanes' claims)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
import redis

from router.table.routing import RouteRequest
from router.table.store.management import CALL_REQUESTS, ManagementTable, TableKeys
from router.table.store.owners import LaneFenced
from router.unit.steps import ownership
from router.unit.steps.ownership import LaneClaims, Unclaimed
from tests.fixtures.helpers import table_snapshot as snapshot
from tests.fixtures.helpers import unique

LANE = "send.q/0"
TP0 = ("send.q", 0)


@pytest.fixture
def units(redis_client: redis.Redis) -> Iterator[tuple[ManagementTable, ManagementTable]]:
    keys = TableKeys.of(unique("holes"), "t", "send")
    zombie, owner = (ManagementTable(redis_client, keys, ["d0", "d1"], policy="wait") for _ in "ab")
    yield zombie, owner
    owner.drop()


def req(gid: str | None, offset: int, final: bool = False, lane: str = LANE) -> RouteRequest:
    return RouteRequest(gid, final, 60_000, f"{lane}/{offset}", lane)


def deliver_g1(owner: ManagementTable) -> None:
    """The new owner replays G1 from the committed offsets, delivers and releases it."""
    owner.route([req("G1", 1), req("G1", 2, final=True)], batch="n1")
    owner.settle("n1", [], [("G1", f"{LANE}/2")])
    assert owner.entries() == {}


def test_a_fenced_call_over_several_lanes_writes_no_claim_either(
    units: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    """`fenced_lane` recorded the caller's token for a lane without a claim (Redis came
    back without the hash) before it found a later lane fenced: a refused call wrote."""
    zombie, owner = units
    zombie.claim(["send.q/0", "send.q/1"])
    redis_client.delete(owner.keys.owners)  # Redis came back without the claims ...
    owner.claim(["send.q/1"])  # ... and send.q/1 moved on since
    before = snapshot(redis_client, owner.keys)
    with pytest.raises(LaneFenced) as caught:
        zombie.route([req("G1", 1, lane="send.q/0"), req("G2", 1, lane="send.q/1")], batch="z")
    assert caught.value.lane == "send.q/1"
    assert snapshot(redis_client, owner.keys) == before, "a fenced call wrote a claim"
    assert owner.owners() == {"send.q/1": owner.claims["send.q/1"]}


class Coordinator:
    """The group coordinator's answer to "which of these does this member hold now?"
    (`router.unit.membership.GroupView.held`): a stand-in here, where the table is the
    subject; tests/integration/faults/test_late_claim.py asks the real one."""

    def __init__(self, holds: set[tuple[str, int]]) -> None:
        self.holds = holds

    def held(self, tps: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        return set(tps) & self.holds


def test_a_zombies_lazy_claim_does_not_let_its_stale_batch_through(
    units: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    zombie_table, owner_table = units
    zombie_view, owner_view = Coordinator({TP0}), Coordinator({TP0})
    zombie = LaneClaims(zombie_table, zombie_view.held)
    owner = LaneClaims(owner_table, owner_view.held)
    # Redis refuses the zombie-to-be's claim at its assignment (here: the owners key holds
    # the wrong type; in production Redis was away for a moment).
    redis_client.set(owner_table.keys.owners, "not a hash")
    zombie.assigned([TP0])  # logged, not raised: claimed before the first route
    redis_client.delete(owner_table.keys.owners)
    assert zombie_table.unclaimed([LANE]) == {LANE}
    # It polls G1's first member and freezes before routing it. Its session ends; the
    # partition moves on; the new owner claims it, replays G1 and delivers it whole.
    zombie_view.holds = set()
    owner.assigned([TP0])
    deliver_g1(owner_table)
    # The zombie resumes with its stale batch: the coordinator does not confirm the lane,
    # so it claims nothing and routes nothing.
    with pytest.raises(Unclaimed):
        zombie.ensure({LANE})
    assert owner_table.entries() == {}, "the zombie re-created a delivered group"
    assert owner_table.owners() == {LANE: owner_table.claims[LANE]}


def test_a_late_assignment_callback_does_not_fence_the_partitions_next_owner(
    units: tuple[ManagementTable, ManagementTable],
) -> None:
    zombie_table, owner_table = units
    owner_view = Coordinator({TP0})
    zombie = LaneClaims(zombie_table, Coordinator(set()).held)
    owner = LaneClaims(owner_table, owner_view.held)
    # The zombie's consumer was assigned send.q/0, then the process froze before its poll
    # ran on_assign. Its session ended meanwhile, and the partition went to the owner.
    owner.assigned([TP0])
    owner.ensure({LANE})
    assert owner_table.route([req("G1", 1)], batch="n1").decisions == ["d0"]
    zombie.assigned([TP0])  # resumed: the stale callback runs, the coordinator says no
    assert zombie_table.claims == {}
    owner.ensure({LANE})
    final = owner_table.route([req("G1", 2, final=True)], batch="n2")  # not fenced
    assert final.decisions == ["d0"]


def test_a_claim_taken_late_anyway_is_undone_by_the_owners_next_recheck(
    units: tuple[ManagementTable, ManagementTable], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late claim that got through anyway (the zombie confirmed just before its freeze):
    the owner is fenced once, asks the coordinator, still holds the partition, and claims
    it again; the zombie is fenced from then on."""
    zombie_table, owner_table = units
    zombie = LaneClaims(zombie_table, Coordinator({TP0}).held)
    owner = LaneClaims(owner_table, Coordinator({TP0}).held)
    owner.assigned([TP0])
    zombie.assigned([TP0])  # newer: the owner is fenced
    with pytest.raises(LaneFenced) as caught:
        owner_table.route([req("G1", 1)], batch="n1")
    owner.fenced(caught.value.lane)
    monkeypatch.setattr(ownership, "RECHECK_S", 0.0)
    owner.ensure({LANE})
    assert owner_table.route([req("G1", 1)], batch="n2").decisions == ["d0"]
    with pytest.raises(LaneFenced):
        zombie_table.route([req("G2", 2)], batch="z1")


def test_chunked_route_calls_carry_their_claims(
    units: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    """More requests than one call takes (CALL_REQUESTS): every chunk carries the fences
    after the carried finals and the earlier batches, and the zombie's first chunk is
    refused, so nothing of its batch is written."""
    zombie, owner = units
    lanes = [f"send.q/{p}" for p in range(3)]
    zombie.claim(lanes)
    n = CALL_REQUESTS + 500
    requests = [req(f"G{i % 7}", i, final=i % 7 == 6, lane=lanes[i % 3]) for i in range(n)]
    got = zombie.route(requests, batch="z1", carried=[("X", "x/1")], earlier=["z0"])
    assert len(got.decisions) == n and got.decisions[0] in {"d0", "d1"}
    assert owner.owners() == zombie.claims  # every chunk's fences read as fences
    owner.claim(lanes[2:])
    before = snapshot(redis_client, owner.keys)
    later = [req(f"H{i % 5}", n + i, lane=lanes[i % 3]) for i in range(n)]
    with pytest.raises(LaneFenced):
        zombie.route(later, batch="z2", carried=[("X", "x/1")], earlier=["z1"])
    assert snapshot(redis_client, owner.keys) == before, "a fenced chunk wrote"


def test_a_unit_assigned_many_partitions_claims_them_all(
    units: tuple[ManagementTable, ManagementTable],
) -> None:
    """One assignment of more lanes than Lua's unpack() takes (about 8,000): the claim
    must not fail (it would leave room lanes unclaimed, and so unfenced, for good)."""
    _, owner = units
    lanes = [f"q{t}/{p}" for t in range(100) for p in range(100)]
    got = owner.claim(lanes)
    assert len(got) == len(lanes)
    assert owner.owners() == got


ROOM_LANE = "room.send/0"


def test_a_zombies_late_settle_does_not_open_a_later_group_of_the_same_id(
    units: tuple[ManagementTable, ManagementTable],
) -> None:
    """A settle's drains name their groups by ID only: a unit frozen between its drain
    batch's commit and its settle, resumed after the ID came again as a new group admitted
    meanwhile with as many parks, opened that group before its parked records were drained
    (the drain then dead-lettered them, room-late). The drains are fenced now by the
    caller's claims on the room lanes they came from, as they were when it drained them
    (`settle.lua`)."""
    zombie, owner = units
    zombie.claim([ROOM_LANE])  # the zombie-to-be owns the room partition
    drained_under = dict(zombie.claims)  # its claim when it drains (Output.drain_claims)
    # g0 holds d0 and g9 d1; H waits in the room with one park; g0 ends: H is admitted.
    owner.route([req("g0", 1), req("g9", 2), req("H", 3)], batch="b1")
    owner.settle("b1", [])
    owner.settle("r1", [], [("g0", "*")])
    assert owner.admitted() == {"H": "d0"}
    # The zombie-to-be drains H's one parked record, commits, and freezes before its
    # settle, which would open H: drains [("H", 1, -1)]. The room partition moves on; the
    # new owner reads the drain marker and opens H itself; H ends and is released.
    owner.claim([ROOM_LANE])
    owner.settle("n1", [], [], [("H", 1, -1)], dict(owner.claims))
    assert owner.entries()["H"].state == "open" and owner.last_fenced is None
    owner.route([req("H", 4, final=True)], batch="n2")
    owner.settle("n2", [], [("H", f"{LANE}/4")])
    # The ID comes again, a new group: it waits behind g1 and g9, then is admitted.
    owner.route([req("g1", 5), req("H", 6)], batch="n3")
    owner.settle("n3", [])
    owner.settle("r2", [], [("g1", "*")])
    assert owner.admitted() == {"H": "d0"}
    # The zombie resumes and settles its committed drain batch: the new H must stay
    # admitted until its own parked record is drained.
    zombie.settle("z1", [], [], [("H", 1, -1)], drained_under)
    assert owner.entries()["H"].state == "admitted", "a stale settle opened a later group"
    assert zombie.last_fenced == ROOM_LANE
    # The new owner's own drain of it opens it.
    owner.settle("n4", [], [], [("H", 1, -1)], dict(owner.claims))
    assert owner.entries()["H"].state == "open"


def test_a_fenced_settle_still_ends_its_leases_and_releases_its_finals(
    units: tuple[ManagementTable, ManagementTable],
) -> None:
    """Only the drains are fenced: the zombie's batch committed, so its in-flight leases
    end and its finals release their groups (by their token, which a reused ID does not
    match)."""
    zombie, owner = units
    zombie.claim([ROOM_LANE, LANE])
    drained_under = {ROOM_LANE: zombie.claims[ROOM_LANE]}
    zombie.route([req("G", 1), req("G", 2, final=True), req(None, 3)], batch="z1")
    assert zombie.inflight()
    owner.claim([ROOM_LANE])
    zombie.settle("z1", ["d1", "d0"], [("G", f"{LANE}/2")], [("~x", 1, -1)], drained_under)
    assert zombie.last_fenced == ROOM_LANE
    assert owner.entries() == {}
    assert owner.inflight() == {}


def test_a_fenced_settle_still_finishes_a_logical_group_at_the_number_its_drain_reached(
    units: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    """Logical order: the number a drain reached is recorded for a group its own batch's
    final releases (by its token) even when the drains are fenced: a later copy of a member
    below it is a duplicate, not a new group (found by the review of the fence)."""
    zombie, owner = units
    zombie.claim([ROOM_LANE])
    drained_under = dict(zombie.claims)

    def member(offset: int, seq: int, final: bool = False) -> RouteRequest:
        return RouteRequest(
            "G", final, 60_000, f"{LANE}/{offset}", LANE, seq=seq, continuation=seq > 0
        )

    owner.route([req("a", 1), req("b", 2)], batch="b1")
    owner.settle("b1", [])
    owner.route([member(3, 0), member(4, 1), member(5, 2, final=True)], batch="b2")
    owner.settle("b2", [])
    owner.route([req("a", 6, final=True)], batch="b3")
    owner.settle("b3", [], [("a", f"{LANE}/6")])
    closing = owner.entries()["G"].closing
    owner.claim([ROOM_LANE])
    # the zombie's drain forwarded members 0 to 2 (the final): its final and the number reached
    zombie.settle("z1", ["d0"], [("G", closing)], [("G", -1, 3)], drained_under)
    assert zombie.last_fenced == ROOM_LANE
    assert redis_client.hget(owner.keys.done, "G").startswith(b"3|")
    assert owner.route([member(7, 1)], batch="b4").decisions == ["!D"]
