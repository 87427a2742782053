"""Chained drains: complete waiting groups written back to back behind an admitted group,
in the same transaction (policy `wait`, `docs/explanation/waiting-room.md#chained-drains`).
Pure rules on the table model; `router/table/store/lua/chain.lua` is the same decision on
Redis, and the property test runs both side by side.

The promise asks for contiguity, not for one group per transaction. A drain batch that
forwards an admitted group's parked final frees the group's destination when it commits;
until then nothing else writes to that destination (it is in charge of the group). The
same batch may therefore write other *complete* waiting groups to it, each whole and one
after the other, so that the destination carries complete groups back to back instead of
one group per transaction. The drain step (`router.unit.steps.drain.chaining`) names the
candidates it holds whole (every parked record read, the final among them, all on the room
partition of the group it drains, so that one unit always drains them all), and a lane's
parked ordinary messages likewise (they need no final, and are released by the same
settle); this decides which of them are still what the drainer saw, and admits them to the
destination. If the batch aborts, they stay admitted to it, and the partition's next drain
writes them all again in one transaction."""

from __future__ import annotations

from collections.abc import Sequence

from router.table import placement, room
from router.table.routing import STOPPED
from router.table.state import TableState

# (destination, the admitted groups the batch forwards whole to it, the candidates as
# (group, parks the drainer holds, the source position of the final it holds))
Plan = Sequence[tuple[str, Sequence[str], Sequence[tuple[str, int, str]]]]


def chainable(t: TableState, dest: str, heads: Sequence[str]) -> bool:
    """Whether more may follow `heads` on `dest` in this batch: every group the destination
    is in charge of is among them, admitted to it (and forwarded whole by the batch, the
    drainer says); no ordinary message in flight to it; not draining; no multicast copies
    waiting for it (they go next, as `room.admit` would send them)."""
    if not heads or dest not in t.destinations or t.load.get(dest, 0) != len(set(heads)):
        return False
    if dest in placement.excluded(t.destinations, t.draining):
        return False
    if any(d == dest for (d, _) in t.inflight) or room.copy_group(dest) in t.room:
        return False
    for gid in heads:
        entry = t.entries.get(gid)
        if entry is None or entry.state != room.ADMITTED or entry.dest != dest:
            return False
    return True


def complete(t: TableState, gid: str, parks: int, final: str) -> bool:
    """Whether a candidate waits, every park it counted held by the drainer and none in
    flight: a lane's ordinary messages (`room.ordinary_group`) so, or a group in lane order
    whose final (at source position `final`) is routed."""
    entry = t.entries.get(gid)
    if (
        entry is None
        or entry.state != room.WAITING
        or gid not in t.room
        or entry.parks != parks
        or any(g == gid for (g, _) in t.park_leases)
    ):
        return False
    if room.is_pseudo(gid):
        return room.copy_target(gid) is None
    return entry.next < 0 and entry.closing not in ("", STOPPED) and entry.closing == final


def chain(t: TableState, plan: Plan) -> dict[str, list[str]]:
    """Admit, per destination of `plan` that may take more, the candidates that are still
    complete, in the drainer's order. Returns destination -> the groups admitted to it."""
    out: dict[str, list[str]] = {}
    for dest, heads, candidates in plan:
        if not chainable(t, dest, heads):
            continue
        taken: list[str] = []
        for gid, parks, final in candidates:
            if complete(t, gid, parks, final):
                del t.room[gid]
                entry = t.entries[gid]
                entry.state, entry.dest = room.ADMITTED, dest
                t.load[dest] = t.load.get(dest, 0) + 1
                taken.append(gid)
        if taken:
            out[dest] = out.get(dest, []) + taken
    return out
