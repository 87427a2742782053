"""Which destination a new group or an ordinary message takes (`router.table.routing`'s
"Choosing among candidates"), on the pure table model: no I/O. `route.lua` (`choose`,
`follow`) takes the same decisions; the property test runs both side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from router.table.state import TableState


def choose(
    destinations: Sequence[str],
    cursor: int,
    skip: Set[str],
    cost: Sequence[tuple[int, bool]],
    reuse: Mapping[tuple[str, str], int] | None = None,
    lane: str = "",
    home: int | None = None,
) -> tuple[int, bool]:
    """(index of the cheapest destination at or after the cursor, whether it is busy),
    `skip` (draining destinations) left out. Among the cheapest, a new group prefers one
    that a final of its own `lane` freed in this batch (`reuse`: (destination, lane) -> such
    finals): a lane's groups that follow each other then stay on few destinations, and the clean
    ones stay clean for the other lanes and for the waiting room. Spreading them instead
    left every destination holding one lane's closed groups until its batch settled, so
    the next batch's other lanes found none clean and waited (policy `wait`) or shared.
    Then, new group or ordinary message, the lane's `home` (`home` below) if it is among
    the cheapest, else the first at or after the cursor."""
    n = len(destinations)
    best = min(c for d, c in zip(destinations, cost, strict=True) if d not in skip)
    first = None
    for k in range(n):
        i = (cursor + k) % n
        d = destinations[i]
        if cost[i] == best and d not in skip:
            if reuse is not None and reuse.get((d, lane), 0) > 0:
                return i, best != (0, False)
            if first is None:
                first = i
    assert first is not None, "unreachable: some destination has the minimum cost"
    if home is not None and cost[home] == best and destinations[home] not in skip:
        return home, best != (0, False)
    return first, best != (0, False)


def home(lane: str, destinations: int, homes: int) -> int | None:
    """The destination index a lane prefers among the cheapest, when `homes` (the table's
    setting: 0 off, else the topology's cell count) is on: its source partition `p` (a lane
    is "<topic>/<p>"), as the `p // homes`-th of its cell's partitions, modulo the
    destinations. On only when a cell has at least as many source partitions as
    destinations (`router.topology.side.table_for`), so that every destination is some
    lane's home. Under policy `wait`, lanes that pick destinations by the cursor alone
    take each other's: one lane's ordinary messages fence the destination another lane's
    next group needed (another batch's in-flight records), and that group waits in the
    room, with every later group behind it. With a home each, lanes keep apart.
    None when off or when the lane names no partition."""
    if homes <= 0:
        return None
    _, _, p = lane.rpartition("/")
    if not p.isdigit():
        return None
    return (int(p) // homes) % destinations


def follow(
    t: TableState,
    lane: str,
    freed_lane: Mapping[tuple[str, str], int],
    carried_lane: Mapping[tuple[str, str], int],
    closed: Set[str],
) -> int | None:
    """While others wait, a new group whose final comes later in the same route call (it
    is complete within its batch, and not in logical order) may still go straight to a
    destination freed by a final of its own lane routed in this call, not carried from an
    earlier batch: the first at or after the cursor with nothing else open there and not
    `closed` (fenced by another batch, or draining). Both groups are released at this
    batch's settle, the first moment the oldest waiting group could have had that
    destination, so nobody waits longer for it; without this, one waiting group makes
    every later one wait behind it (a cascade that never ends under steady load).
    Returns the destination's index, or None."""
    n = len(t.destinations)
    for k in range(n):
        i = (t.cursor + k) % n
        d = t.destinations[i]
        mine = freed_lane.get((d, lane), 0)
        if d not in closed and mine > carried_lane.get((d, lane), 0) and t.load.get(d, 0) == mine:
            return i
    return None
