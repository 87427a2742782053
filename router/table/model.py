"""The management table as a pure model: the specification of `router.table.routing`'s rules.

No I/O. The Lua scripts (`router/table/store/lua/`) must take the same decisions and leave the same
table; `tests/integration/table/test_table_properties.py` runs both on random histories.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from router.table import choice, known, multicast, placement, room
from router.table.call import RouteCall
from router.table.lifecycle import Lifecycle
from router.table.routing import (
    DUPLICATE,
    HELD,
    IGNORED,
    NO_DEST,
    ORPHAN,
    PARKED,
    SKIPPED,
    STOPPED,
    Entry,
    RouteRequest,
    RouteResult,
    TraceStep,
    updated_at,
)


@dataclass
class TableModel(Lifecycle):
    """One management table (send side or receive side), and its rules."""

    def excluded(self) -> set[str]:
        """Draining destinations nothing new is placed on (`router.table.placement.excluded`)."""
        return placement.excluded(self.destinations, self.draining)

    def route(
        self,
        requests: Sequence[RouteRequest],
        now_ms: int,
        batch: str = "batch",
        lease_ms: int = 15_000,
        trace: list[TraceStep] | None = None,
        carried: Sequence[tuple[str, str]] = (),
        earlier: Sequence[str] = (),
    ) -> RouteResult:
        """`carried`: finals (gid, token) routed before this call in a transaction that
        commits before this batch's records are written (the caller's `earlier` batches,
        whose ordinary messages therefore fence nothing for it): a group of theirs that is
        not released yet counts as closed earlier in this batch."""
        room.expire(self, now_ms)  # a lease that ended may have made a destination clean
        fenced = {d for (d, b) in self.inflight if b != batch and b not in earlier}
        c = RouteCall(self, batch, now_ms, lease_ms, fenced, self.excluded(), trace)
        carried_lane: Counter[tuple[str, str]] = Counter()
        for done, token in carried:
            e = self.entries.get(done)
            if e is not None and e.state == room.OPEN and e.closing == token and e.dest != NO_DEST:
                lane, _, offset = token.rpartition("/")
                lane = lane if offset.isdigit() else ""  # the final's own lane
                c.close(done, e.dest, lane)
                carried_lane[(e.dest, lane)] += 1
        last_final = {
            r.guarantee_id: i for i, r in enumerate(requests) if r.final and not r.targets
        }
        batch_dest: str | None = None
        for at, r in enumerate(requests):
            if r.lane in c.held_lanes:
                c.decisions.append(SKIPPED)
                continue
            if r.targets:  # multicast (receive side): a copy per queue, straight or parked
                c.decide(r, multicast.route(self, r, c.freed, batch, now_ms, lease_ms), False)
                continue
            gid = r.guarantee_id
            entry = self.entries.get(gid) if gid is not None else None
            if entry is not None:
                assert gid is not None
                known.route(self, c, r, gid, entry)
                continue
            if gid is not None and r.close:
                c.decide(r, IGNORED, False)
                continue
            if gid is not None and r.continuation and r.seq is None:
                c.orphans += 1
                c.decide(r, ORPHAN, False)
                continue
            if gid is not None and r.poison_stop:
                self.entries[gid] = Entry(NO_DEST, now_ms, now_ms, r.ttl_ms, STOPPED, r.lane)
                c.stopped += 1
                c.decide(r, PARKED, False)
                continue
            if gid is not None and r.seq and gid in self.done and r.seq < self.done[gid][0]:
                # a late copy (a retry, a member skipped past a gap) of a group that finished
                c.decide(r, DUPLICATE, False)
                continue
            if gid is not None and r.seq:  # logical order: its first members may follow
                staged = r.complete and self.policy == "wait"
                d = (room.stage if staged else room.wait)(self, gid, r, batch, now_ms, lease_ms)
                c.decide(r, d, False)
                room.sequence(self.entries[gid], r, False)
                continue
            ordinary = gid is None
            freed, freed_lane = c.freed, c.freed_lane
            if (
                ordinary
                and batch_dest is not None
                and self.load.get(batch_dest, 0) == freed[batch_dest]
            ):
                c.decide(r, batch_dest, False)
                continue
            if r.complete and self.policy == "wait":
                assert gid is not None  # whole-group delivery: staged until its final
                c.decide(r, room.stage(self, gid, r, batch, now_ms, lease_ms), False)
                room.sequence(self.entries[gid], r, False)
                continue
            if ordinary:
                cost = [(self.load.get(d, 0) - freed[d], False) for d in self.destinations]
            else:
                cost = [
                    (self.load.get(d, 0) - freed_lane[(d, r.lane)], d in fenced)
                    for d in self.destinations
                ]
            index, busy = choice.choose(
                self.destinations,
                self.cursor,
                c.skip,
                cost,
                None if ordinary else freed_lane,
                r.lane,
                choice.home(r.lane, len(self.destinations), self.homes),
            )
            queued = not ordinary and room.queued(self)  # first come, first served ...
            if queued and not busy and r.seq is None and last_final.get(gid, -1) >= at:
                follows = choice.follow(self, r.lane, freed_lane, carried_lane, fenced | c.skip)
                if follows is not None:  # ... but one complete here may follow its lane
                    index, queued = follows, False
            waits = busy or queued
            if waits and self.policy == "wait":  # a timed-out hold waits too: never shared
                if ordinary:
                    pg = room.ordinary_group(r.lane)
                    e = self.entries.get(pg)
                    d = (
                        room.parked_message(self, pg, e, r, batch, now_ms, lease_ms)
                        if e is not None
                        else room.wait(self, pg, r, batch, now_ms, lease_ms)
                    )
                    c.decide(r, d, False)
                else:
                    assert gid is not None
                    c.decide(r, room.wait(self, gid, r, batch, now_ms, lease_ms), False)
                    room.sequence(self.entries[gid], r, False)
                continue
            if busy and self.policy == "hold" and not r.force_share:
                c.hold(r, False)
                continue
            if busy:
                c.shared += 1
            dest = self.destinations[index]
            c.decide(r, dest, False)
            self.cursor = (index + 1) % len(self.destinations)
            if gid is None:
                batch_dest = dest
                self.inflight[(dest, batch)] = now_ms + lease_ms
            else:
                token = r.token if r.final else ""
                self.entries[gid] = Entry(dest, now_ms, now_ms, r.ttl_ms, token, r.lane)
                room.sequence(self.entries[gid], r, True)
                self.load[dest] = self.load.get(dest, 0) + 1
                c.created += 1
                if freed[dest]:
                    c.taken.add(dest)
                if r.final:
                    c.close(gid, dest, r.lane)
        for e in self.entries.values():  # used now (a pin no message reached yet keeps its own)
            if e.updated_ms == now_ms and e.state != placement.PINNED:
                e.updated_ms = updated_at(now_ms, e.ttl_ms)
        held = c.decisions.count(HELD)
        return RouteResult(c.decisions, c.shared, held, c.created, c.stopped, c.orphans)
