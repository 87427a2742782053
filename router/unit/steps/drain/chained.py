"""Chained drains, the drain step's I/O half (`router.unit.steps.drain.chaining` decides
what to ask, `router.table.chain` what the table grants): the granted groups are written
back to back behind the groups a drain batch forwards whole."""

from __future__ import annotations

import logging
from typing import Protocol

import redis

from router.metrics.registry import Metrics
from router.table import room
from router.table.routing import RoomState
from router.table.store.management import ManagementTable
from router.table.store.owners import LaneFenced
from router.unit.steps.batch import TP, Batch
from router.unit.steps.drain import chaining
from router.unit.steps.drain import writes as drainwrite
from router.unit.steps.drain.context import Draining
from router.unit.steps.emit.records import Output
from router.unit.steps.ownership import LaneClaims, Unclaimed, lane_of


class Chaining(Draining, Protocol):
    """What a chain reads of the drain besides what its writes do (`Draining`)."""

    @property
    def table(self) -> ManagementTable: ...
    @property
    def owned(self) -> set[TP]: ...
    @property
    def claims(self) -> LaneClaims | None: ...
    @property
    def metrics(self) -> Metrics: ...


log = logging.getLogger("router.drain")


def chain(
    d: Chaining,
    heads: dict[str, list[tuple[TP, str]]],
    states: dict[str, RoomState],
    out: Output,
    batch: Batch,
    now_ms: int,
) -> set[str]:
    """Write complete waiting groups back to back behind the groups this batch forwards
    whole (`router.unit.steps.drain.chaining`, `router.table.chain`); the chained IDs.
    If Redis cannot say, nothing is chained: a chain the table made but this batch does
    not write stays admitted, and the partition's next drain writes it."""
    request = chaining.plan(heads, d.index.groups, states)
    if not request:
        return set()
    lanes = {lane_of(*tp) for tp in d.owned}
    try:
        if d.claims is not None:
            d.claims.ensure(lanes)
        taken = d.table.chain(request, lanes)
    except LaneFenced as exc:  # another unit owns the partition now: nothing changed
        d.metrics.inc("lanes_fenced")
        if d.claims is not None:
            d.claims.fenced(exc.lane)
        log.warning("no chained drain this batch: %s", exc)
        return set()
    except Unclaimed as exc:
        log.warning("no chained drain this batch: %s", exc)
        return set()
    except redis.RedisError as exc:
        d.metrics.inc("redis_errors")
        log.warning("no chained drain this batch: %s", exc)
        return set()
    chained = set()
    for dest, gids in taken.items():
        tp = heads[dest][0][0]
        for gid in gids:
            parked = d.index.groups[tp][gid]
            ts_type, ts = parked[0].m.timestamp()
            out.room_waits_ms.append(max(now_ms - ts, 0) if ts_type else 0)
            drainwrite.forward(d, tp, gid, parked, dest, out, batch, now_ms)
            d.opening.add(gid)
            chained.add(gid)
            if room.is_pseudo(gid):  # a lane: released by this settle if nothing came
                drainwrite.drained(d, out, tp, (gid, len(parked), -1))
    out.chained += len(chained)
    return chained


__all__ = ["chain"]
