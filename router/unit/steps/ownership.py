"""A unit's claims on its partitions in the management table: the fence against its own
zombie (`router.table.store.owners`).

Each partition the unit is assigned (source and room partitions: its lanes) is claimed at
once (`assigned`); a claim that Redis could not take then is taken before the first route
call that speaks for the lane (`ensure`). A route or chained-drain call that a newer claim
refuses (`router.table.store.owners.LaneFenced`) fails its batch: the unit backs off and
its consumer learns it lost the partition. Should the consumer still hold the partition
`heal_after_s` later (twice the consumer session: Kafka would have taken it away from a
unit that lost it), the claim was lost by other means (a claim taken late, after a Redis
outage at assignment, by a unit that had meanwhile lost the partition): the unit claims
again rather than stay fenced for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import redis

from router.table.store.management import ManagementTable
from router.unit.steps.batch import TP

log = logging.getLogger("router.unit")


def lane_of(topic: str, partition: int) -> str:
    """A partition's lane name, as the table knows it (route requests, claims)."""
    return f"{topic}/{partition}"


class LaneClaims:
    def __init__(self, table: ManagementTable, heal_after_s: float) -> None:
        self.table = table
        self.heal_after_s = heal_after_s
        self.fenced_since: dict[str, float] = {}  # lane -> when a call was first refused

    def assigned(self, tps: Iterable[TP]) -> None:
        """Claim newly assigned partitions; if Redis is away, `ensure` claims them later."""
        lanes = [lane_of(t, p) for t, p in tps]
        for lane in lanes:
            self.fenced_since.pop(lane, None)
        try:
            self.table.claim(lanes)
        except redis.RedisError as exc:
            log.warning("claiming %d partitions in the table failed, retried: %s", len(lanes), exc)

    def revoked(self, tps: Iterable[TP]) -> None:
        lanes = [lane_of(t, p) for t, p in tps]
        self.table.disclaim(lanes)
        for lane in lanes:
            self.fenced_since.pop(lane, None)

    def ensure(self, lanes: Iterable[str]) -> None:
        """Before a call speaking for `lanes` (all assigned): claim those without a claim,
        and again those fenced for longer than `heal_after_s`. Raises RedisError."""
        table = self.table
        now = time.monotonic()
        stale = [lane for lane, t in self.fenced_since.items() if now - t >= self.heal_after_s]
        if stale:
            log.warning(
                "lanes %s still assigned %.0f s after they were fenced: claimed again",
                ", ".join(sorted(stale)),
                self.heal_after_s,
            )
            table.disclaim(stale)
            for lane in stale:
                del self.fenced_since[lane]
        missing = table.unclaimed(lanes)
        if missing:
            table.claim(missing)

    def fenced(self, lane: str) -> None:
        self.fenced_since.setdefault(lane, time.monotonic())
