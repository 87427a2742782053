"""The management table as a pure model: the specification of `router.table.routing`'s rules.

No I/O. The Lua scripts (`router/table/store/lua/`) must take the same decisions and leave the same
table; `tests/integration/table/test_table_properties.py` runs both on random histories.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from router.table import choice, multicast, placement, room
from router.table.lifecycle import Lifecycle
from router.table.routing import (
    DUPLICATE,
    HELD,
    IGNORED,
    NO_DEST,
    ORPHAN,
    PARKED,
    SKIPPED,
    SPANS,
    STOPPED,
    STOPPING,
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
        skip = self.excluded()  # draining: neither free nor clean for anything new
        decisions: list[str] = []
        # Groups per destination whose final was routed earlier in this batch, in all and
        # per (destination, lane) of the final.
        freed: Counter[str] = Counter()
        freed_lane: Counter[tuple[str, str]] = Counter()
        closed_here: dict[str, tuple[str, str]] = {}  # gid -> (destination, lane)
        taken: set[str] = set()  # destinations a new group took after a final freed them

        def close(gid: str, dest: str, lane: str) -> None:
            if gid not in closed_here:
                closed_here[gid] = (dest, lane)
                freed[dest] += 1
                freed_lane[(dest, lane)] += 1

        def reopen(gid: str) -> None:
            if gid in closed_here:
                dest, lane = closed_here.pop(gid)
                freed[dest] -= 1
                freed_lane[(dest, lane)] -= 1

        carried_lane: Counter[tuple[str, str]] = Counter()
        for done, token in carried:
            e = self.entries.get(done)
            if e is not None and e.state == room.OPEN and e.closing == token and e.dest != NO_DEST:
                lane, _, offset = token.rpartition("/")
                lane = lane if offset.isdigit() else ""  # the final's own lane
                close(done, e.dest, lane)
                carried_lane[(e.dest, lane)] += 1
        last_final = {
            r.guarantee_id: i for i, r in enumerate(requests) if r.final and not r.targets
        }

        def record(r: RouteRequest, known: bool) -> None:
            if trace is not None:
                load, ds = self.load, [d for d in self.destinations if d not in skip]
                free = frozenset(d for d in ds if load.get(d, 0) == freed[d])
                lane_free = {d for d in ds if load.get(d, 0) == freed_lane[(d, r.lane)]}
                trace.append(
                    TraceStep(
                        r,
                        decisions[-1],
                        known,
                        free,
                        frozenset(lane_free - fenced),
                        frozenset(skip),
                    )
                )

        held_lanes: set[str] = set()
        shared = created = stopped = orphans = 0
        batch_dest: str | None = None
        for at, r in enumerate(requests):
            if r.lane in held_lanes:
                decisions.append(SKIPPED)
                continue
            if r.targets:  # multicast (receive side): a copy per queue, straight or parked
                decisions.append(multicast.route(self, r, freed, batch, now_ms, lease_ms))
                record(r, False)
                continue
            gid = r.guarantee_id
            entry = self.entries.get(gid) if gid is not None else None
            if entry is not None and entry.state == placement.PINNED:
                placement.first_message(entry, r)  # from now an ordinary open entry
            if entry is not None:
                assert gid is not None
                # Logical order: lanes do not matter (a first message after a final that
                # went straight, the ID reused, follows the lane rules).
                logical = (
                    r.seq is not None
                    and entry.next >= 0
                    and not (
                        r.seq == 0
                        and entry.closing not in ("", STOPPED)
                        and entry.state == room.OPEN
                    )
                )
                if not logical and entry.closing != STOPPED and entry.lane not in ("", r.lane):
                    if not r.continuation and not r.force_share:
                        # A first message: the ID reused on another lane, while the old
                        # group's lane may still be behind. Wait for its release, at
                        # most the hold timeout (then the old group never ended: SPANS).
                        held_lanes.add(r.lane)
                        decisions.append(HELD)
                    else:
                        decisions.append(SPANS)
                    record(r, True)
                    continue
                entry.updated_ms = now_ms
                entry.lane = entry.lane or r.lane
                if entry.closing == STOPPED:
                    if entry.state == room.OPEN and r.poison_stop and entry.dest != NO_DEST:
                        # its stop not settled yet (the batch that stopped it aborted, and
                        # this is its replay): closed on its destination again
                        decisions.append(STOPPING + entry.dest)
                    else:
                        decisions.append(
                            PARKED
                            if entry.state == room.OPEN
                            else room.park(self, gid, entry, batch, now_ms, lease_ms, r.token)
                        )
                    record(r, True)
                    continue
                if r.poison_stop and entry.state == room.ADMITTED and entry.dest != NO_DEST:
                    # Its destination is the drain's (it may be writing there, a chain
                    # too): stopped in the room, parked behind the others; the drain
                    # dead-letters what is left and closes it (router.unit.steps.drain).
                    reopen(gid)
                    entry.closing = STOPPED
                    stopped += 1
                    decisions.append(room.park(self, gid, entry, batch, now_ms, lease_ms, r.token))
                    record(r, True)
                    continue
                if r.poison_stop:
                    reopen(gid)
                    entry.closing = STOPPED
                    entry.state, entry.parks = room.OPEN, 0
                    # its parked messages: `docs/explanation/waiting-room.md`
                    room.forget(self, gid)
                    stopped += 1
                    decisions.append(STOPPING + entry.dest)
                    record(r, True)
                    continue
                if room.reuses(entry, r):
                    if not r.force_share:
                        held_lanes.add(r.lane)  # until the old group's release
                        decisions.append(HELD)
                        record(r, True)
                        continue
                    if entry.state != room.OPEN:  # held too long: it joins the old group
                        d = room.parked_message(self, gid, entry, r, batch, now_ms, lease_ms)
                        if r.complete and d == room.WAIT:
                            entry.unstaged = r.token  # its replay answers UNSTAGED again
                            d = room.UNSTAGED
                        decisions.append(d)
                        record(r, True)
                        continue
                if entry.state != room.OPEN:
                    decisions.append(
                        room.parked_message(self, gid, entry, r, batch, now_ms, lease_ms)
                    )
                    record(r, True)
                    continue
                if logical and not room.goes_straight(entry, r):
                    reopen(gid)
                    decisions.append(room.readmit(self, gid, entry, r, batch, now_ms, lease_ms))
                    record(r, True)
                    continue
                others = self.load.get(entry.dest, 0) - freed[entry.dest]
                others -= gid not in closed_here  # its own entry, if it still counts
                if self.policy == "wait" and room.crowds(entry, r, others):
                    held_lanes.add(r.lane)  # never beside another open group
                    decisions.append(HELD)
                    record(r, True)
                    continue
                if gid in closed_here and entry.dest in taken:
                    # The ID reused after its final in this batch, whose destination
                    # another group took since: a new group, which waits for the release.
                    if not r.force_share or self.policy == "wait":  # wait never shares
                        held_lanes.add(r.lane)
                        decisions.append(HELD)
                        record(r, True)
                        continue
                    shared += 1
                entry.ttl_ms = r.ttl_ms
                decisions.append(entry.dest)
                record(r, True)
                if entry.next >= 0:
                    room.sequence(entry, r, True)
                if r.final:
                    entry.closing = r.token
                    close(gid, entry.dest, r.lane)
                elif entry.closing:
                    entry.closing = ""
                    reopen(gid)  # the ID reused in this very batch
                continue
            if gid is not None and r.close:
                decisions.append(IGNORED)
                record(r, False)
                continue
            if gid is not None and r.continuation and r.seq is None:
                orphans += 1
                decisions.append(ORPHAN)
                record(r, False)
                continue
            if gid is not None and r.poison_stop:
                self.entries[gid] = Entry(NO_DEST, now_ms, now_ms, r.ttl_ms, STOPPED, r.lane)
                stopped += 1
                decisions.append(PARKED)
                record(r, False)
                continue
            if gid is not None and r.seq and gid in self.done and r.seq < self.done[gid][0]:
                decisions.append(DUPLICATE)  # a late copy (a retry, a member skipped past
                record(r, False)  # a gap) of a group that finished
                continue
            if gid is not None and r.seq:  # logical order: its first members may follow
                staged = r.complete and self.policy == "wait"
                decisions.append(
                    (room.stage if staged else room.wait)(self, gid, r, batch, now_ms, lease_ms)
                )
                room.sequence(self.entries[gid], r, False)
                record(r, False)
                continue
            ordinary = gid is None
            if (
                ordinary
                and batch_dest is not None
                and self.load.get(batch_dest, 0) == freed[batch_dest]
            ):
                decisions.append(batch_dest)
                record(r, False)
                continue
            if r.complete and self.policy == "wait":
                assert gid is not None  # whole-group delivery: staged until its final
                decisions.append(room.stage(self, gid, r, batch, now_ms, lease_ms))
                room.sequence(self.entries[gid], r, False)
                record(r, False)
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
                skip,
                cost,
                None if ordinary else freed_lane,
                r.lane,
                choice.home(r.lane, len(self.destinations), self.homes),
            )
            queued = not ordinary and room.queued(self)  # first come, first served ...
            if queued and not busy and r.seq is None and last_final.get(gid, -1) >= at:
                follows = choice.follow(self, r.lane, freed_lane, carried_lane, fenced | skip)
                if follows is not None:  # ... but one complete here may follow its lane
                    index, queued = follows, False
            waits = busy or queued
            if waits and self.policy == "wait":  # a timed-out hold waits too: never shared
                if ordinary:
                    pg = room.ordinary_group(r.lane)
                    e = self.entries.get(pg)
                    decisions.append(
                        room.parked_message(self, pg, e, r, batch, now_ms, lease_ms)
                        if e is not None
                        else room.wait(self, pg, r, batch, now_ms, lease_ms)
                    )
                else:
                    assert gid is not None
                    decisions.append(room.wait(self, gid, r, batch, now_ms, lease_ms))
                    room.sequence(self.entries[gid], r, False)
                record(r, False)
                continue
            if busy and self.policy == "hold" and not r.force_share:
                held_lanes.add(r.lane)
                decisions.append(HELD)
                record(r, False)
                continue
            if busy:
                shared += 1
            dest = self.destinations[index]
            decisions.append(dest)
            record(r, False)
            self.cursor = (index + 1) % len(self.destinations)
            if gid is None:
                batch_dest = dest
                self.inflight[(dest, batch)] = now_ms + lease_ms
            else:
                token = r.token if r.final else ""
                self.entries[gid] = Entry(dest, now_ms, now_ms, r.ttl_ms, token, r.lane)
                room.sequence(self.entries[gid], r, True)
                self.load[dest] = self.load.get(dest, 0) + 1
                created += 1
                if freed[dest]:
                    taken.add(dest)
                if r.final:
                    close(gid, dest, r.lane)
        for e in self.entries.values():  # used now (a pin no message reached yet keeps its own)
            if e.updated_ms == now_ms and e.state != placement.PINNED:
                e.updated_ms = updated_at(now_ms, e.ttl_ms)
        held = decisions.count(HELD)
        return RouteResult(decisions, shared, held, created, stopped, orphans)
