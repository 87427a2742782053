"""The table model's rules for a message of a group the table knows (an entry under its
guarantee ID): straight to the group's destination, parked behind its waiting messages,
held, stopped, or the ID reused. Pure: no I/O; `router.table.model` routes the others, and
`route.lua` takes the same decisions (the property test runs both side by side)."""

from __future__ import annotations

from router.table import placement, room
from router.table.call import RouteCall
from router.table.routing import NO_DEST, PARKED, SPANS, STOPPED, STOPPING, Entry, RouteRequest
from router.table.state import TableState


def route(t: TableState, c: RouteCall, r: RouteRequest, gid: str, entry: Entry) -> None:
    """Decide `r`, a message under `gid`, whose entry is `entry`."""
    if entry.state == placement.PINNED:
        placement.first_message(entry, r)  # from now an ordinary open entry
    batch, now_ms, lease_ms = c.batch, c.now_ms, c.lease_ms
    # Logical order: lanes do not matter (a first message after a final that went
    # straight, the ID reused, follows the lane rules).
    logical = (
        r.seq is not None
        and entry.next >= 0
        and not (r.seq == 0 and entry.closing not in ("", STOPPED) and entry.state == room.OPEN)
    )
    if not logical and entry.closing != STOPPED and entry.lane not in ("", r.lane):
        if not r.continuation and not r.force_share:
            # A first message: the ID reused on another lane, while the old group's lane
            # may still be behind. Wait for its release, at most the hold timeout (then
            # the old group never ended: SPANS).
            c.hold(r, True)
        else:
            c.decide(r, SPANS, True)
        return
    entry.updated_ms = now_ms
    entry.lane = entry.lane or r.lane
    if entry.closing == STOPPED:
        if entry.state == room.OPEN and r.poison_stop and entry.dest != NO_DEST:
            # its stop not settled yet (the batch that stopped it aborted, and this is its
            # replay): closed on its destination again
            c.decide(r, STOPPING + entry.dest, True)
        elif entry.state == room.OPEN:
            c.decide(r, PARKED, True)
        else:
            c.decide(r, room.park(t, gid, entry, batch, now_ms, lease_ms, r.token), True)
        return
    if r.poison_stop and entry.state == room.ADMITTED and entry.dest != NO_DEST:
        # Its destination is the drain's (it may be writing there, a chain too): stopped
        # in the room, parked behind the others; the drain dead-letters what is left and
        # closes it (router.unit.steps.drain).
        c.reopen(gid)
        entry.closing = STOPPED
        c.stopped += 1
        c.decide(r, room.park(t, gid, entry, batch, now_ms, lease_ms, r.token), True)
        return
    if r.poison_stop:
        c.reopen(gid)
        entry.closing = STOPPED
        entry.state, entry.parks = room.OPEN, 0
        room.forget(t, gid)  # its parked messages: `docs/explanation/waiting-room.md`
        c.stopped += 1
        c.decide(r, STOPPING + entry.dest, True)
        return
    if room.reuses(entry, r):
        if not r.force_share:
            c.hold(r, True)  # until the old group's release
            return
        if entry.state != room.OPEN:  # held too long: it joins the old group
            d = room.parked_message(t, gid, entry, r, batch, now_ms, lease_ms)
            if r.complete and d == room.WAIT:
                entry.unstaged = r.token  # its replay answers UNSTAGED again
                d = room.UNSTAGED
            c.decide(r, d, True)
            return
    if entry.state != room.OPEN:
        c.decide(r, room.parked_message(t, gid, entry, r, batch, now_ms, lease_ms), True)
        return
    if logical and not room.goes_straight(entry, r):
        c.reopen(gid)
        c.decide(r, room.readmit(t, gid, entry, r, batch, now_ms, lease_ms), True)
        return
    if t.policy == "wait":
        others = t.load.get(entry.dest, 0) - c.freed[entry.dest]
        others -= gid not in c.closed_here  # its own entry, if it still counts
        if room.crowds(entry, r, others):
            c.hold(r, True)  # never beside another open group
            return
    if gid in c.closed_here and entry.dest in c.taken:
        # The ID reused after its final in this batch, whose destination another group
        # took since: a new group, which waits for the release.
        if not r.force_share or t.policy == "wait":  # wait never shares
            c.hold(r, True)
            return
        c.shared += 1
    entry.ttl_ms = r.ttl_ms
    c.decide(r, entry.dest, True)
    if entry.next >= 0:
        room.sequence(entry, r, True)
    if r.final:
        entry.closing = r.token
        c.close(gid, entry.dest, r.lane)
    elif entry.closing:
        entry.closing = ""
        c.reopen(gid)  # the ID reused in this very batch
