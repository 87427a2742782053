"""A unit's claims on its lanes (`router.unit.steps.ownership`): claimed on assignment once the
group's coordinator confirms them, else before the first route call (which waits while the
coordinator does not confirm), forgotten on revocation, and claimed again after a fence only
while the coordinator still gives the partition to this member (the newer claim was a late
one). Pure logic: stand-ins for the table and the coordinator; the fence itself is proven
against the real Redis (tests/integration/table/test_lane_fence.py, test_fence_holes.py) and
the whole against real units (tests/integration/unit/test_zombie_fence.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import pytest
import redis

from router.metrics.registry import Metrics
from router.table.store.management import ManagementTable
from router.unit.steps import ownership
from router.unit.steps.batch import TP, Batch
from router.unit.steps.drain.step import Drain
from router.unit.steps.emit.records import Output
from router.unit.steps.ownership import LaneClaims, Unclaimed


class Table:
    def __init__(self) -> None:
        self.claims: dict[str, str] = {}
        self.claimed: list[list[str]] = []
        self.down = False

    def claim(self, lanes: Iterable[str]) -> dict[str, str]:
        if self.down:
            raise redis.ConnectionError("away")
        got = sorted(lanes)
        if got:
            self.claimed.append(got)
        self.claims.update({lane: str(len(self.claimed)) for lane in got})
        return {lane: self.claims[lane] for lane in got}

    def disclaim(self, lanes: Iterable[str]) -> None:
        for lane in lanes:
            self.claims.pop(lane, None)

    def unclaimed(self, lanes: Iterable[str]) -> set[str]:
        return {lane for lane in lanes if lane not in self.claims}


class Coordinator:
    """What the group's coordinator says this member holds (None: it cannot say)."""

    def __init__(self, holds: set[TP] | None) -> None:
        self.holds = holds
        self.asked = 0

    def held(self, tps: Iterable[TP]) -> set[TP] | None:
        self.asked += 1
        return None if self.holds is None else set(tps) & self.holds


def claims_on(table: Table, coordinator: Coordinator | None = None) -> LaneClaims:
    return LaneClaims(
        cast(ManagementTable, table), None if coordinator is None else coordinator.held
    )


def test_assigned_partitions_the_coordinator_confirms_are_claimed_at_once() -> None:
    table, coord = Table(), Coordinator({("send.q", 0), ("room", 1)})
    c = claims_on(table, coord)
    c.assigned([("send.q", 0), ("room", 1), ("send.q", 2)])  # 2: not confirmed (yet)
    assert table.claimed == [["room/1", "send.q/0"]]
    c.ensure({"send.q/0"})
    assert len(table.claimed) == 1 and coord.asked == 1  # held: no round trip
    with pytest.raises(Unclaimed, match=r"send\.q/2"):
        c.ensure({"send.q/0", "send.q/2"})  # the batch waits; nothing claimed
    coord.holds = {("send.q", 0), ("room", 1), ("send.q", 2)}  # the rebalance settled
    c.ensure({"send.q/2"})
    assert table.claimed[-1] == ["send.q/2"]
    c.revoked([("send.q", 0)])
    assert table.unclaimed(["send.q/0", "room/1"]) == {"send.q/0"}


def test_a_late_callback_claims_nothing_the_group_gave_away() -> None:
    """A zombie's rebalance callback, run after its freeze: the coordinator no longer
    counts it as a member, so it claims nothing, and its first route call waits."""
    table, coord = Table(), Coordinator(set())
    c = claims_on(table, coord)
    c.assigned([("send.q", 0)])
    assert table.claimed == []
    with pytest.raises(Unclaimed):
        c.ensure({"send.q/0"})
    assert table.claimed == []


def test_a_claim_redis_refused_at_assignment_is_taken_before_the_first_route() -> None:
    table, coord = Table(), Coordinator({("send.q", 0)})
    table.down = True
    c = claims_on(table, coord)
    c.assigned([("send.q", 0)])  # logged, not raised: the rebalance callback goes on
    assert table.claimed == []
    with pytest.raises(redis.ConnectionError):
        c.ensure({"send.q/0"})  # the route step fails the batch: backs off, retried
    table.down = False
    c.ensure({"send.q/0"})
    assert table.claimed == [["send.q/0"]]


def test_a_coordinator_unable_to_say_refuses_nothing() -> None:
    """The broker away or the request timed out: the consumer's word is taken (a unit must
    go on routing); claims are then ordered by when they reach Redis."""
    table, coord = Table(), Coordinator(None)
    c = claims_on(table, coord)
    c.assigned([("send.q", 0)])
    assert table.claimed == [["send.q/0"]]


def test_a_fenced_lane_is_claimed_again_only_while_the_coordinator_gives_it_to_us(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(ownership.time, "monotonic", lambda: now[0])
    table, coord = Table(), Coordinator({("send.q", 0)})
    c = claims_on(table, coord)
    c.assigned([("send.q", 0)])
    c.fenced("send.q/0")  # a newer claim refused our call
    coord.holds = set()  # ... because we lost the partition: a zombie's view
    c.ensure({"send.q/0"})
    assert len(table.claimed) == 1 and "send.q/0" in c.fenced_since  # left fenced
    coord.holds = {("send.q", 0)}  # the newer claim was a late one: we hold it
    c.ensure({"send.q/0"})
    assert len(table.claimed) == 1, "asked again before RECHECK_S"
    now[0] += ownership.RECHECK_S
    c.ensure({"send.q/0"})
    assert table.claimed[-1] == ["send.q/0"] and c.fenced_since == {}


def test_without_a_coordinator_view_claims_are_taken_as_assigned() -> None:
    table = Table()
    c = claims_on(table)
    c.assigned([("send.q", 0)])
    c.revoked([("send.q", 0)])
    c.ensure({"send.q/0"})
    assert table.claimed == [["send.q/0"], ["send.q/0"]]


class RoomTable(Table):
    """The drain's view of the table: its claims, and what it asked of the room."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []

    def room_state(self, gids: list[str]) -> dict[str, object]:
        self.asked.append(gids)
        return {}

    def admitted(self) -> dict[str, str]:
        return {}


def test_a_plain_drain_claims_its_room_partitions_before_draining() -> None:
    """A settle's drains carry the claims they were drained under (`Output.drain_claims`): a
    room partition whose claim was refused at the assignment is claimed before the drain, as
    before a chained drain, or its drains would go unfenced; while the coordinator does not
    confirm it, nothing is drained (the batch goes on without)."""
    table, coord = RoomTable(), Coordinator(set())
    drain = Drain(cast(ManagementTable, table), None, "room", 1, None, Metrics())  # type: ignore[arg-type]
    drain.claims = claims_on(table, coord)
    drain.claims.assigned([("room", 0)])  # refused: not confirmed yet
    drain.assign([("room", 0)])
    drain.emit(Batch("b1", 0), Output(), 0)
    assert table.asked == [] and table.claimed == []  # no drain, nothing claimed
    coord.holds = {("room", 0)}

    class Consumer:
        def position(self, tps: list[object]) -> list[object]:
            return []

        def get_watermark_offsets(self, *args: object) -> tuple[int, int]:
            return 0, 0  # an empty room partition: caught up at once

    drain.consumer = Consumer()
    drain.emit(Batch("b2", 0), Output(), 0)
    assert table.claimed == [["room/0"]] and table.asked == [[]]
