"""The end of a long wait in the room (`routing.max_wait_ms`, `routing.wait_timeout_policy`),
on the pure table model: no I/O. `room_timeout.lua` takes the same steps (the sweeper calls
it); the property test runs both side by side."""

from __future__ import annotations

from router.table import placement
from router.table.room import ADMITTED, WAIT, copy_target, is_pseudo
from router.table.routing import STOPPED
from router.table.state import TableState


def time_out(t: TableState, now_ms: int, max_wait_ms: int, policy: str) -> list[tuple[str, str]]:
    """Groups waiting since `now_ms - max_wait_ms` or earlier (oldest first, then by ID):
    policy "report" (the default) only reports each once (outcome WAIT): it keeps waiting,
    never interleaved, and so do a lane's ordinary messages; "share" admits each to the
    least-loaded destination even if busy (the first at or after the cursor), "dead-letter"
    stops it (its parked and later messages are dead-lettered); under those two a lane's
    ordinary messages are shared. Returns (gid, destination, STOPPED or WAIT). Draining
    destinations are skipped. Multicast copies never time out: they wait for their
    queue's groups to end (at the latest at their TTL)."""
    if policy == "report":  # each wait start once: the work is the newly overdue only
        cutoff, upto = now_ms - max_wait_ms, t.reported_upto
        due = sorted(
            (s, g)
            for g, s in t.room.items()
            if s <= cutoff and (upto is None or s > upto) and copy_target(g) is None
        )
        t.reported_upto = cutoff if upto is None else max(upto, cutoff)
        return [(g, WAIT) for _, g in due]
    out = []
    n, skip = len(t.destinations), placement.excluded(t.destinations, t.draining)
    for gid in sorted(
        (g for g, s in t.room.items() if s <= now_ms - max_wait_ms and copy_target(g) is None),
        key=lambda g: (t.room[g], g),
    ):
        entry = t.entries[gid]
        del t.room[gid]
        if policy == "share" or is_pseudo(gid):  # ordinary messages are shared, never lost
            best = min(t.load.get(d, 0) for d in t.destinations if d not in skip)
            index = next(
                i
                for k in range(n)
                if t.load.get(d := t.destinations[i := (t.cursor + k) % n], 0) == best
                and d not in skip
            )
            dest = t.destinations[index]
            t.cursor = (index + 1) % n
            entry.state, entry.dest = ADMITTED, dest
            t.load[dest] = t.load.get(dest, 0) + 1
            out.append((gid, dest))
        else:
            # Stopped, but still in the room's hands: its later messages are parked behind
            # the earlier ones, and the drain dead-letters them all, in order.
            entry.state, entry.closing = ADMITTED, STOPPED
            out.append((gid, STOPPED))
    return out
