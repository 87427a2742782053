"""Cells: one topology split into disjoint shares, each with a table per side of its own
(docs/explanation/cells.md). Pure logic, no I/O.

Cell `c` of `C` owns partition `p` of every send queue (and its band topics) with
`p mod C = c`, transfer partition `t` with `t mod C = c`, the `i`-th receive queue with
`i mod C = c`, and room partition `r` of each side with `r mod C = c`. A unit's sources (send
queues on the send side, the transfer topic on the receive side) and its room are all read
by partition, so the cell of any record a unit polls is its partition modulo `C`.

Cell 0's tables keep today's keys, `<prefix>:{<topology>:<side>}:...`; cell `c > 0`'s are
`<prefix>:{<topology>/<c>:<side>}:...` (a topology's name cannot hold a '/', so no cell's tag
is another topology's). With `topology.cells = 1` nothing differs from a topology without cells.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from router.config.settings import RouterSettings
from router.errors import ConfigError
from router.table.store.management import Side


def all_cells(settings: RouterSettings) -> range:
    return range(settings.topology.cells)


def cell_of(partition: int, cells: int) -> int:
    """The cell of a partition of a send queue, of the transfer topic or of a room topic (or
    of the index of a receive queue)."""
    return partition % cells


def _check(cell: int, cells: int) -> None:
    if not 0 <= cell < cells:
        raise ConfigError(f"cell {cell} does not exist: topology.cells = {cells} (0..{cells - 1})")


def owned(n: int, cell: int, cells: int) -> list[int]:
    """The numbers below `n` (partitions, or queue indexes) that `cell` owns."""
    _check(cell, cells)
    return list(range(cell, n, cells))


def destinations(settings: RouterSettings, side: Side, cell: int | None = 0) -> tuple[str, ...]:
    """The names a cell's table of `side` routes to (None: every cell's): transfer
    partitions ('0', '3', ...) on the send side, receive queues on the receive side."""
    t = settings.topology
    step, first = (1, 0) if cell is None else (t.cells, cell)
    if side == "send":
        return tuple(str(p) for p in owned(t.receive_units, first, step))
    return tuple(t.receive_queues[i] for i in owned(len(t.receive_queues), first, step))


def cell_of_destination(settings: RouterSettings, side: Side, dest: str) -> int | None:
    """The cell whose table routes to `dest` (None: no destination of that side)."""
    t = settings.topology
    if side == "send":
        return int(dest) % t.cells if dest.isdigit() and int(dest) < t.receive_units else None
    if dest not in t.receive_queues:
        return None
    return t.receive_queues.index(dest) % t.cells


def room_partitions(settings: RouterSettings, cell: int = 0) -> list[int]:
    """The partitions of each side's room topic that `cell` parks in and drains."""
    return owned(settings.routing.room_partitions, cell, settings.topology.cells)


def source_partitions(settings: RouterSettings, side: Side, cell: int = 0) -> list[int]:
    """The partitions of every source topic of `side` (each send queue and its bands; the
    transfer topic and its bands) that `cell` owns."""
    t = settings.topology
    n = t.send_queue_partitions if side == "send" else t.receive_units
    return owned(n, cell, t.cells)


def tag(topology: str, cell: int = 0) -> str:
    """What a cell's table keys carry before ':<side>' in their hash tag: the topology's name
    for cell 0 (today's keys), '<topology>/<cell>' for the others."""
    if cell < 0:
        raise ConfigError(f"cell {cell} does not exist")
    return topology if cell == 0 else f"{topology}/{cell}"


def units_can_route(settings: RouterSettings) -> None:
    """ConfigError for what units cannot do yet over several cells: wait for replicas on a
    Redis Cluster (a unit's `WAIT` runs on one node; its cells' tables are on several)."""
    r = settings.redis
    if settings.topology.cells > 1 and r.cluster_nodes and r.min_replica_acks:
        raise ConfigError(
            f"topology.cells = {settings.topology.cells} with redis.cluster_nodes: not built "
            "yet for redis.min_replica_acks (a unit waits for the replicas of one node only)"
        )


def room_partition(gid: str, partitions: int | Sequence[int]) -> int:
    """Where a group's parked records go: all of one group on one partition, in order; one of
    `partitions` (a count: 0 .. count - 1; or the room partitions of the group's cell,
    `router.topology.cells`)."""
    if isinstance(partitions, int):
        return zlib.crc32(gid.encode()) % partitions
    return partitions[zlib.crc32(gid.encode()) % len(partitions)]
