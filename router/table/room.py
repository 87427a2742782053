"""The waiting room's rules (policy `wait`), on the pure table model: no I/O.

Design: `docs/explanation/waiting-room.md`. The table's half, here and in the Lua scripts
(`router/table/store/lua/prelude.lua`, `route.lua`, `settle.lua`, `room_timeout.lua`), which the
property test runs side by side; the room topic's half is the drain step
(`router.unit.steps.drain`).

A group that finds no clean destination, or arrives while others wait (first come, first
served, but for a group complete within its batch that follows its lane's final:
`router.table.choice.follow`),
is parked (WAIT) and *waits*; its later messages are parked too, each parking
batch holding a park lease on the group. When a destination becomes clean (its groups
released, no ordinary message in flight), the oldest waiting group is *admitted* to it:
the destination is reserved for the group, whose parked messages the drain step forwards.
Once a drain batch settles with every park of the group drained and none in flight, the
group is *open* like any other (its next messages go straight to the destination); the
ordinary messages' pseudo-group of a lane (`~<lane>`) is released instead, and so is a
destination's multicast copies pseudo-group (`~*<dest>`, `router.table.multicast`, any policy),
which waits for that destination only.
"""

from __future__ import annotations

from router.contract.headers import RESERVED_PREFIX
from router.table import placement
from router.table.routing import NO_DEST, STOPPED, Entry, RouteRequest
from router.table.state import TableState

WAIT = "!w"  # park the message in the room
UNSTAGED = "!W"  # park it, and its group's staging ended at the bound: it waits streamed
OPEN, WAITING, ADMITTED = "open", "waiting", "admitted"  # Entry.state
STAGED = "staged"  # whole-group delivery: parked until its final, then waiting
# prefix of the pseudo-group that gathers one lane's parked ordinary messages (no group's ID
# starts with it: `router.contract.headers.RESERVED_PREFIX`)
PSEUDO = RESERVED_PREFIX
COPIES = "~*"  # ... and of one receive queue's waiting multicast copies (`router.table.multicast`)


def ordinary_group(lane: str) -> str:
    return PSEUDO + lane


def is_pseudo(gid: str) -> bool:
    return gid.startswith(PSEUDO)


def copy_group(dest: str) -> str:
    """The pseudo-group of the multicast copies waiting for destination `dest` (a lane is
    "topic/partition", and a topic name never starts with '*')."""
    return COPIES + dest


def copy_target(gid: str) -> str | None:
    """The one destination a copies pseudo-group may be admitted to; None for any other."""
    return gid[len(COPIES) :] if gid.startswith(COPIES) else None


def queued(t: TableState) -> bool:
    """Whether a group (or a lane's ordinary messages) waits for any clean destination: a
    new group then queues behind it. Multicast copies wait for their own queue only."""
    return any(copy_target(g) is None for g in t.room)


def replayed(entry: Entry, token: str) -> bool:
    """Whether the message at source position `token` was parked for this group already:
    its batch aborted (the table keeps what it routed) and this is its replay. Known for
    the lane of the group's last parked message, where positions only grow."""
    return bool(token) and at_or_before(token, entry.parked)


def park(
    t: TableState, gid: str, entry: Entry, batch: str, now_ms: int, lease_ms: int, token: str = ""
) -> str:
    """Count one more parked message of the group, under the batch's park lease. A replay
    (an aborted batch's park was counted already) counts nothing twice, unless the group is
    admitted: there the count is what a drain's check compares (`drained`), and a replay
    whose batch settled before that check's settle shows nowhere else (its lease gone), so
    the group would open (a lane's, be released) under its record."""
    if not replayed(entry, token):
        entry.parks += 1
        entry.parked = token or entry.parked
    elif entry.state == ADMITTED:
        entry.parks += 1
    t.park_leases[(gid, batch)] = now_ms + lease_ms
    return WAIT


def wait(t: TableState, gid: str, r: RouteRequest, batch: str, now_ms: int, lease_ms: int) -> str:
    """A new group (or a lane's first parked ordinary message) joins the room."""
    token = r.token if r.final and not is_pseudo(gid) else ""
    entry = Entry(NO_DEST, now_ms, now_ms, r.ttl_ms, token, r.lane, WAITING)
    t.entries[gid] = entry
    t.room[gid] = now_ms
    return park(t, gid, entry, batch, now_ms, lease_ms, r.token)


def stage(t: TableState, gid: str, r: RouteRequest, batch: str, now_ms: int, lease_ms: int) -> str:
    """A new group asking for whole-group delivery: parked, but not waiting for a
    destination (not in the room's FIFO) until its final is parked too."""
    if r.final or t.max_staged <= 1:  # complete already, or over the bound at once
        wait(t, gid, r, batch, now_ms, lease_ms)
        if r.final:
            return WAIT
        t.entries[gid].unstaged = r.token
        return UNSTAGED
    entry = Entry(NO_DEST, now_ms, now_ms, r.ttl_ms, "", r.lane, STAGED)
    t.entries[gid] = entry
    return park(t, gid, entry, batch, now_ms, lease_ms, r.token)


def parked_message(
    t: TableState, gid: str, entry: Entry, r: RouteRequest, batch: str, now_ms: int, lease_ms: int
) -> str:
    """A message of a staged, waiting or admitted group: parked behind the group's earlier
    ones. A final marks the entry closing (released once the drain forwarded and committed
    it), and a staged group then waits for a destination, from now; a message after the
    final (the ID reused) clears the mark, but for a group in logical order, whose
    members come in any order, and for the replay of one before it. A replay counts
    nothing twice and answers as before (UNSTAGED again for the message that hit the
    staging bound: its event rode in the aborted transaction)."""
    entry.updated_ms = now_ms
    entry.ttl_ms = r.ttl_ms
    replay = replayed(entry, r.token)
    if r.final:
        entry.closing = r.token
        if entry.state == STAGED:
            entry.state = WAITING
            t.room[gid] = now_ms
    elif entry.closing and r.seq is None and not at_or_before(r.token, entry.closing):
        entry.closing = ""
    decision = park(t, gid, entry, batch, now_ms, lease_ms, r.token)
    if replay and r.token == entry.unstaged:
        return UNSTAGED
    if entry.state == STAGED and entry.parks >= t.max_staged:
        entry.state = WAITING  # over the bound: it waits as a streamed group, from now
        entry.unstaged = r.token
        t.room[gid] = now_ms
        return UNSTAGED
    return decision


def reuses(entry: Entry, r: RouteRequest) -> bool:
    """Lane order: a message after its group's final (routed, not yet released), not a
    replay of one before it: the ID reused, a new group. It is HELD until the old group's
    release (then it starts on its own) if the old group is still in the room (whose drain
    may write it whole: joining it would split it), or if the new one asks for whole
    delivery (it cannot be staged beside a live entry of its ID). Past the hold timeout
    (`force_share`) it joins the old group as before: a whole one is then UNSTAGED, said by
    a GroupStagingAborted event."""
    return (entry.state != OPEN or r.complete) and r.seq is None and after_final(entry, r)


def after_final(entry: Entry, r: RouteRequest) -> bool:
    """A first message (no sequence number, or 0 in logical order) after its group's final
    (routed, not yet released), not a replay of one before it: the ID reused, a new group."""
    return (
        entry.closing not in ("", STOPPED)
        and not r.continuation
        and not r.seq
        and not at_or_before(r.token, entry.closing)
        and not replayed(entry, r.token)
    )


def crowds(entry: Entry, r: RouteRequest, others: int) -> bool:
    """Policy `wait`: the ID reused (`after_final`) while its old group, open on its
    destination, is not the only group in charge of it (`others`: the destination's other
    groups not closed in this batch or a batch that commits before it). Normally a
    destination carries one open group under `wait`; but a new group may follow a final of
    its lane there in the same batch (the old group waits for that batch's settle), and a
    chain whose settle was lost leaves its complete groups open on one destination until
    the sweeper releases them: the ID reused straight there would open a second group on
    it. It is HELD until the old group's release (then it starts as a new group), whatever
    the hold timeout: `wait` never shares."""
    return others > 0 and after_final(entry, r)


def at_or_before(token: str, fence: str) -> bool:
    """Whether source position `token` is on the same lane as `fence` and not after it."""
    lane, _, offset = token.rpartition("/")
    fence_lane, _, fence_offset = fence.rpartition("/")
    if not (fence and lane == fence_lane and offset.isdigit() and fence_offset.isdigit()):
        return False
    return int(offset) <= int(fence_offset)


def goes_straight(entry: Entry, r: RouteRequest) -> bool:
    """Logical order: whether a member of an open group may go straight to its destination:
    from the group's lane with the next sequence number, or a replay of one that did (at or
    before the fence: its batch aborted, so it is routed again as before)."""
    assert r.seq is not None
    if r.lane != entry.lane or r.seq < 0:  # -1: no readable number, never straight
        return False
    return r.seq == entry.next or (r.seq < entry.next and at_or_before(r.token, entry.fence))


def sequence(entry: Entry, r: RouteRequest, straight: bool) -> None:
    """Logical order: what the entry remembers of a member routed straight (next number,
    fence) or parked as the group's first (its members are forwarded from 0)."""
    if r.seq is None:
        return
    if entry.next < 0 or (straight and entry.closing and r.seq < entry.next):
        entry.origin = r.token  # this group under its ID starts here (drain markers name it)
    if not straight:
        entry.next = max(entry.next, 0)
    elif r.seq >= entry.next or entry.closing:  # not a replay (or the ID reused)
        entry.next, entry.fence = r.seq + 1, r.token


def readmit(
    t: TableState, gid: str, entry: Entry, r: RouteRequest, batch: str, now_ms: int, lease_ms: int
) -> str:
    """Logical order: a member of an open group that may not go straight (out of sequence,
    from another lane, a duplicate) puts its group back in the room, admitted to the
    destination it holds; the drain forwards its parked members in sequence order."""
    entry.state = ADMITTED
    return parked_message(t, gid, entry, r, batch, now_ms, lease_ms)


def clean_destinations(t: TableState) -> list[str]:
    """Destinations a waiting group may be admitted to: in charge of no group, no
    ordinary message of any batch in flight to them, and not draining."""
    leased = {d for (d, _) in t.inflight} | placement.excluded(t.destinations, t.draining)
    return [d for d in t.destinations if t.load.get(d, 0) == 0 and d not in leased]


def admit(t: TableState) -> list[str]:
    """Admit waiting groups, oldest first (by wait start, then ID), while one can be: a
    group (or a lane's ordinary messages) to the first clean destination at or after the
    cursor; a queue's multicast copies to that queue once it is in charge of no group
    (in-flight ordinary messages and draining do not matter to a copy). One that cannot
    be admitted yet does not stop a younger one that can. Returns the admitted IDs."""
    admitted: list[str] = []
    n = len(t.destinations)
    while t.room:
        clean = set(clean_destinations(t))
        pick: tuple[str, str] | None = None
        for gid in sorted(t.room, key=lambda g: (t.room[g], g)):
            target = copy_target(gid)
            if target is not None:
                if t.load.get(target, 0) == 0:
                    pick = (gid, target)
                    break
            elif clean:
                index = next(
                    i for k in range(n) if t.destinations[i := (t.cursor + k) % n] in clean
                )
                t.cursor = (index + 1) % n
                pick = (gid, t.destinations[index])
                break
        if pick is None:
            break
        gid, dest = pick
        del t.room[gid]
        entry = t.entries[gid]
        entry.state, entry.dest = ADMITTED, dest
        t.load[dest] = t.load.get(dest, 0) + 1
        admitted.append(gid)
    return admitted


def expire(t: TableState, now_ms: int) -> tuple[int, list[str]]:
    """End the in-flight and park leases that expired by `now_ms` (their batch will never
    settle: its unit died, or its transaction failed and it was replayed under another
    ID), then admit waiting groups to the destinations that became clean. Every route does
    this first; the sweeper does it each round, so that where nothing is routed any more an
    ended lease neither keeps its destination unclean nor its admitted group from opening.
    Returns (leases ended, groups admitted)."""
    before = len(t.inflight) + len(t.park_leases)
    t.inflight = {k: exp for k, exp in t.inflight.items() if exp > now_ms}
    t.park_leases = {k: exp for k, exp in t.park_leases.items() if exp > now_ms}
    return before - len(t.inflight) - len(t.park_leases), admit(t)


def drained(t: TableState, gid: str, parks_seen: int, next_seq: int = -1) -> str:
    """After a drain batch of the group committed (its own park leases still held):
    the group's state afterwards. It opens (a pseudo-group is released) only if no park
    of it is in flight and none was routed since the drainer read the room's end offsets
    (`parks_seen`); otherwise it stays admitted and the drain goes on. A group in logical
    order learns `next_seq`, the sequence number after the last one drained."""
    entry = t.entries.get(gid)
    if entry is None or entry.state != ADMITTED:
        return OPEN if entry is not None else "gone"
    if entry.next >= 0 and next_seq > entry.next:
        entry.next = next_seq  # what the drain reached, committed
    if entry.parks != parks_seen or any(g == gid for (g, _) in t.park_leases):
        return ADMITTED
    if is_pseudo(gid):
        t.unload(t.entries.pop(gid).dest)
        return "released"
    entry.state, entry.parks = OPEN, 0
    return OPEN


def forget(t: TableState, gid: str) -> None:
    """The entry is gone (released, swept): it no longer waits, nor holds park leases."""
    t.room.pop(gid, None)
    for key in [k for k in t.park_leases if k[0] == gid]:
        del t.park_leases[key]
