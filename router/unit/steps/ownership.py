"""A unit's claims on its partitions in the management table: the fence against its own
zombie (`router.table.store.owners`).

A unit claims each partition it is assigned (source and room partitions: its lanes) once
the group's coordinator confirms that this member holds it now (`held`, `router.unit.membership`):
a rebalance callback that runs late, after a freeze, must not claim partitions the group has
given to another member since, or its claim (the newest) would fence their real owner and let
its own stale batch through. A claim Redis refused, or the coordinator did not confirm, is
taken before the first call that speaks for the lane (`ensure`), confirmed the same way; until
then the call fails (`Unclaimed`: the batch is rewound and the unit backs off). A coordinator
that cannot answer (the broker away, a request timed out) confirms nothing and refuses
nothing: the consumer's word is taken, as a unit must go on routing.

A route or chained-drain call that a newer claim refuses (`router.table.store.owners.LaneFenced`)
fails its batch as well. The unit then asks the coordinator again (at most every `RECHECK_S`):
if this member still holds the partition, the newer claim was a zombie's, taken late, and the
unit claims the partition again; if not, it lost the partition and its consumer will learn so.
Without a coordinator view (`held` None: tests, tools), claims are taken as assigned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import redis

from router.errors import RouterError
from router.table.store.management import ManagementTable
from router.unit.steps.batch import TP

log = logging.getLogger("router.unit")


def lane_of(topic: str, partition: int) -> str:
    """A partition's lane name, as the table knows it (route requests, claims)."""
    return f"{topic}/{partition}"


class Unclaimed(RouterError):
    """A call would speak for partitions this unit holds no claim on, and the group's
    coordinator does not confirm (now) that they are this member's: the batch waits."""


RECHECK_S = 1.0  # between two questions to the coordinator about fenced lanes

Held = Callable[[Iterable[TP]], "set[TP] | None"]


def _tp(lane: str) -> TP:
    topic, _, partition = lane.rpartition("/")
    return topic, int(partition)


class LaneClaims:
    def __init__(self, table: ManagementTable, held: Held | None = None) -> None:
        self.table = table
        self.held = held  # the coordinator's view (router.unit.membership); None: trusted
        self.fenced_since: dict[str, float] = {}  # lane -> when a call was first refused
        self._checked = float("-inf")  # time.monotonic() of the last re-check of fenced lanes

    def _confirmed(self, lanes: Iterable[str]) -> set[str]:
        """The lanes of `lanes` the coordinator says this member holds now; all of them
        without a coordinator view, or if it cannot say now (the broker away, the request
        timed out): then the consumer's word is taken, and claims are ordered by when they
        reach Redis, which the owner's recheck corrects."""
        lanes = set(lanes)
        if self.held is None or not lanes:
            return lanes
        held = self.held([_tp(lane) for lane in lanes])
        if held is None:
            log.warning(
                "the group coordinator cannot confirm partitions now: %d claimed as assigned",
                len(lanes),
            )
            return lanes
        return {lane_of(t, p) for t, p in held}

    def assigned(self, tps: Iterable[TP]) -> None:
        """Claim newly assigned partitions the coordinator confirms; the others (and all,
        if Redis is away) are claimed by `ensure` before they are routed."""
        lanes = [lane_of(t, p) for t, p in tps]
        for lane in lanes:
            self.fenced_since.pop(lane, None)
        mine = self._confirmed(lanes)
        if len(mine) < len(lanes):
            log.warning(
                "the group coordinator does not confirm %d of %d partitions assigned: not "
                "claimed yet",
                len(lanes) - len(mine),
                len(lanes),
            )
        try:
            self.table.claim(mine)
        except redis.RedisError as exc:
            log.warning("claiming %d partitions in the table failed, retried: %s", len(mine), exc)

    def revoked(self, tps: Iterable[TP]) -> None:
        lanes = [lane_of(t, p) for t, p in tps]
        self.table.disclaim(lanes)
        for lane in lanes:
            self.fenced_since.pop(lane, None)

    def ensure(self, lanes: Iterable[str]) -> None:
        """Before a call speaking for `lanes` (assigned, as the consumer believes): claim
        those without a claim, and again those fenced whose partition the coordinator
        still gives this member. Raises Unclaimed (a lane left without a claim) or
        RedisError."""
        table = self.table
        wanted = set(lanes)
        missing = table.unclaimed(wanted)
        recheck: set[str] = set()
        now = time.monotonic()
        if self.fenced_since and now - self._checked >= RECHECK_S:
            self._checked = now
            recheck = set(self.fenced_since)
        if not (missing or recheck):
            return
        mine = self._confirmed(missing | recheck)
        again = recheck & mine
        if again:
            log.warning(
                "partitions %s are still this unit's, by the group coordinator: a newer claim "
                "on them was a late one (a zombie's); claimed again",
                ", ".join(sorted(again)),
            )
            table.disclaim(again)
            for lane in again:
                del self.fenced_since[lane]
        take = (missing & mine) | again
        if take:
            table.claim(take)
        left = missing - mine
        if left:
            raise Unclaimed(
                f"partitions {', '.join(sorted(left))} are not confirmed as this unit's by the "
                "group coordinator (a rebalance in progress, or this unit lost them): nothing "
                "routed; the batch waits"
            )

    def fenced(self, lane: str) -> None:
        self.fenced_since.setdefault(lane, time.monotonic())
