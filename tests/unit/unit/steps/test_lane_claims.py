"""A unit's claims on its lanes (`router.unit.steps.ownership`): claimed on assignment, again
before routing if Redis refused then, forgotten on revocation, and claimed afresh when still
assigned long after a fence (a claim lost by other means must not fence the owner for good).
Pure logic: a table stand-in records the claims; the fence itself is proven against the real
Redis in tests/integration/table/test_lane_fence.py."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import cast

import pytest
import redis

from router.table.store.management import ManagementTable
from router.unit.steps.ownership import LaneClaims, lane_of


class Table:
    def __init__(self) -> None:
        self.claims: dict[str, str] = {}
        self.claimed: list[list[str]] = []
        self.down = False

    def claim(self, lanes: Iterable[str]) -> dict[str, str]:
        if self.down:
            raise redis.ConnectionError("away")
        got = sorted(lanes)
        self.claimed.append(got)
        self.claims.update({lane: str(len(self.claimed)) for lane in got})
        return {lane: self.claims[lane] for lane in got}

    def disclaim(self, lanes: Iterable[str]) -> None:
        for lane in lanes:
            self.claims.pop(lane, None)

    def unclaimed(self, lanes: Iterable[str]) -> set[str]:
        return {lane for lane in lanes if lane not in self.claims}


def claims_on(table: Table, heal_after_s: float = 20.0) -> LaneClaims:
    return LaneClaims(cast(ManagementTable, table), heal_after_s)


def test_assigned_partitions_are_claimed_at_once_and_forgotten_when_revoked() -> None:
    table = Table()
    c = claims_on(table)
    c.assigned([("send.q", 0), ("room", 1)])
    assert table.claimed == [["room/1", "send.q/0"]]
    c.ensure({"send.q/0"})
    assert len(table.claimed) == 1  # held: no round trip
    c.revoked([("send.q", 0)])
    assert table.unclaimed(["send.q/0", "room/1"]) == {"send.q/0"}


def test_a_claim_redis_refused_at_assignment_is_taken_before_the_first_route() -> None:
    table = Table()
    table.down = True
    c = claims_on(table)
    c.assigned([("send.q", 0)])  # logged, not raised: the rebalance callback goes on
    assert table.claimed == []
    with pytest.raises(redis.ConnectionError):
        c.ensure({"send.q/0"})  # the route step fails the batch: backs off, retried
    table.down = False
    c.ensure({"send.q/0"})
    assert table.claimed == [["send.q/0"]]


def test_a_fenced_lane_is_claimed_again_only_when_still_assigned_past_the_bound() -> None:
    table = Table()
    c = claims_on(table, heal_after_s=20.0)
    c.assigned([("send.q", 0)])
    c.fenced(lane_of("send.q", 0))
    c.ensure({"send.q/0"})
    assert len(table.claimed) == 1  # a zombie keeps its old claim: fenced again
    c.fenced_since["send.q/0"] = time.monotonic() - 21.0  # still assigned 21 s later
    c.ensure({"send.q/0"})
    assert table.claimed[-1] == ["send.q/0"] and len(table.claimed) == 2
    assert c.fenced_since == {}


def test_revocation_ends_a_fence_spell() -> None:
    table = Table()
    c = claims_on(table)
    c.assigned([("send.q", 0)])
    c.fenced("send.q/0")
    c.revoked([("send.q", 0)])  # the consumer learned it lost the partition
    assert c.fenced_since == {}
    c.assigned([("send.q", 0)])  # assigned back later: a new claim
    assert len(table.claimed) == 2
