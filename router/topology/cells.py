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


def destinations(settings: RouterSettings, side: Side, cell: int = 0) -> tuple[str, ...]:
    """The names a cell's table of `side` routes to: transfer partitions ('0', '3', ...) on
    the send side, receive queues on the receive side."""
    t = settings.topology
    if side == "send":
        return tuple(str(p) for p in owned(t.receive_units, cell, t.cells))
    return tuple(t.receive_queues[i] for i in owned(len(t.receive_queues), cell, t.cells))


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


def not_built(settings: RouterSettings, what: str) -> None:
    """ConfigError if the topology has more than one cell: `what` does not work by cell yet."""
    cells = settings.topology.cells
    if cells > 1:
        raise ConfigError(
            f"topology.cells = {cells}: not built yet for {what} (issue 30, item 3: built "
            "are the settings, each cell's destinations and table keys; not yet the units' "
            "routing by cell, the waiting room's cell partitions, the sweeper and the operators' "
            "tools per cell); set topology.cells = 1"
        )
