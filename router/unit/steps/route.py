"""The route step: a classified batch -> one management-table call -> a decision per item.

Requests are `router.table.routing.RouteRequest`s, encoded by the table
(`router.table.store.management.encode`), so the flags are spelled in one place. A bad message whose
group is known is routed too, so that its group stays whole (dead-lettered but routed, or stopping
its group). Redis unavailable marks the batch failed: nothing of it may be forwarded.
"""

from __future__ import annotations

import logging
import time

import redis

from router.config.settings import RoutingSettings
from router.metrics.registry import Metrics
from router.table.routing import HELD, RouteRequest
from router.table.store.management import ManagementTable
from router.table.store.owners import LaneFenced
from router.unit.steps.batch import Batch, Item
from router.unit.steps.emit.reasons import cross_cell
from router.unit.steps.holds import Holds
from router.unit.steps.ownership import LaneClaims, Unclaimed, lane_of
from router.utils.faults import Faults

log = logging.getLogger("router.route")


def request_for(
    item: Item, rules: RoutingSettings, lane: str, force_share: bool, sequenced: bool = False
) -> RouteRequest:
    """What the table needs to know about one item (call only for items with a group or
    good routing headers). `sequenced`: logical order applies (the send side's; the
    receive side gets each group from one transfer partition, already in order)."""
    m, r, bad = item.m, item.routing, item.bad
    complete = r.complete if r is not None else bad is not None and bad.complete
    asked_logical = r.logical if r is not None else bad is not None and bad.logical
    logical = sequenced and asked_logical
    if r is not None:
        gid, final, ttl, seq = r.guarantee_id, r.final, r.ttl_ms, r.seq
    else:
        assert bad is not None and bad.guarantee_id is not None
        gid, final, ttl, seq = bad.guarantee_id, bad.final, rules.default_ttl_ms, bad.seq
    if item.close:
        assert gid is not None
        token = f"{lane}/{m.offset()}"
        return RouteRequest(gid, True, ttl, token, lane, continuation=True, close=True)
    # Positional, in the fields' order (keywords cost twice as much, for every message)
    return RouteRequest(
        gid,
        final,
        ttl,
        # token, its source position: a final's release, logical order, and the room's
        # replay marks (`router.table.room.replayed`) read it
        f"{lane}/{m.offset()}",
        lane,
        force_share,
        bad is not None and not item.stop,  # dead
        bad is not None and item.stop,  # poison_stop
        # continuation: on the receive side a logical group comes from one transfer
        # partition, in order, from its first member on, or from past a gap the send side
        # gave up on (gap policy deliver): not an orphan there.
        gid is not None and bool(seq) and (logical or not asked_logical),
        False,  # close
        complete,
        # seq: an unreadable number (a bad member): -1, parked and dead-lettered by the drain
        (-1 if seq is None else seq) if logical else None,
        (),  # targets (set by the caller for multicast)
        # lane_seq: lane order (here: also the receive side's logical groups, one lane
        # each): the table only records a readable number, for `router table show`
        None if logical or gid is None else seq,
    )


class TableRoute:
    def __init__(
        self,
        table: ManagementTable,
        rules: RoutingSettings,
        metrics: Metrics,
        holds: Holds,
        faults: Faults,
        sequenced: bool = False,
        fanout: bool = False,
        claims: LaneClaims | None = None,
        cell_queues: tuple[str, ...] | None = None,
    ) -> None:
        # the receive queues of this unit's cell, if the topology has several (multicast
        # beyond them is dead-lettered: `router.unit.steps.emit.reasons.cross_cell`)
        self.cell_queues = None if cell_queues is None else frozenset(cell_queues)
        self.claims = claims  # the unit's claims on its lanes: None, not fenced (tools, tests)
        self.sequenced = sequenced  # logical order applies (send side)
        self.fanout = fanout  # multicast messages are copied to their queues (receive side)
        self.table = table
        self.rules = rules
        self.metrics = metrics
        self.holds = holds
        self.faults = faults
        self._lanes: dict[tuple[str, int], str] = {}

    def lane(self, topic: str, partition: int) -> str:
        lane = self._lanes.get((topic, partition))
        if lane is None:
            lane = self._lanes[(topic, partition)] = lane_of(topic, partition)
        return lane

    def route(self, batch: Batch) -> None:
        rules, holds, metrics = self.rules, self.holds, self.metrics
        now = time.monotonic()
        requests: list[RouteRequest] = []
        routed: list[Item] = []
        cell_queues = self.cell_queues
        lanes, sequenced, fanout = self._lanes, self.sequenced, self.fanout
        held = bool(holds)
        for item in batch.items:
            if (
                cell_queues is not None
                and item.targets
                and item.bad is None
                and self.fanout
                and not cell_queues.issuperset(item.targets)
            ):
                item.bad = cross_cell(item, cell_queues)
            if item.bad is not None and item.bad.guarantee_id is None:
                # bad (expired, say), and no group to keep whole: dead-lettered as it is,
                # never given a destination (whose in-flight lease its batch would not end)
                continue
            m = item.m
            tp = (m.topic(), m.partition())
            force = held and holds.timed_out(tp, m.offset(), now)
            if force:
                metrics.inc("hold_timeouts")
            lane = lanes.get(tp) or self.lane(*tp)
            request = request_for(item, rules, lane, force, sequenced)
            if item.targets and fanout and item.bad is None:
                request.targets = item.targets  # router.table.multicast
            requests.append(request)
            routed.append(item)
        if self.faults.hit("before_route"):  # a zombie in the making (tests)
            self.faults.freeze("before_route")
        table = self.table
        epoch, resets = table.epoch, table.resets
        memory = getattr(table, "memory", None)  # (a table without one: tools, tests)
        decided, stale = (memory.decided, memory.stale) if memory is not None else (0, 0)
        batch.routed_at = time.monotonic()
        t0 = time.perf_counter_ns()
        try:
            if self.claims is not None and requests:
                self.claims.ensure({r.lane for r in requests})
            result = table.route(
                requests, batch=batch.id, carried=batch.carried, earlier=batch.earlier
            )
        except LaneFenced as exc:  # this unit lost the partition (a zombie): nothing changed
            metrics.inc("lanes_fenced")
            if self.claims is not None:
                self.claims.fenced(exc.lane)
            batch.failure = str(exc)
            return
        except Unclaimed as exc:
            batch.failure = str(exc)
            return
        except redis.RedisError as exc:
            metrics.inc("redis_errors")
            batch.failure = f"Redis unavailable, nothing forwarded: {exc}"
            return
        if requests:
            metrics.inc("redis_round_trips")
            rtt_ns = time.perf_counter_ns() - t0
            metrics.inc("route_us", rtt_ns // 1000)
            metrics.observe("redis_rtt_seconds", rtt_ns / 1e9)
        if memory is not None:
            metrics.inc("remembered", memory.decided - decided)
            metrics.inc("memory_stale", memory.stale - stale)
        metrics.inc("busy_shared", result.shared)
        metrics.inc("busy_held", result.held)
        metrics.inc("orphans", result.orphans)
        if table.resets > resets:
            metrics.inc("table_resets")
            batch.table_reset = (epoch, table.epoch)
            log.error(
                "table lost (epoch %s -> %s): Redis came back without its data? Groups with "
                "sequence numbers are protected; open groups without them may split.",
                epoch,
                table.epoch,
            )
        held_at = batch.held_at
        for item, decision in zip(routed, result.decisions, strict=True):
            item.decision = decision
            if decision == HELD:
                held_at[(item.m.topic(), item.m.partition())] = item.m.offset()
        if self.faults.hit("after_route"):
            self.faults.die("after_route")
