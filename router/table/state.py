"""A management table's contents, as the pure rules read and change them (no I/O): the
model (`router.table.model.TableModel`) is this state with the routing rules on it, and the rule
modules (`router.table.room`, `router.table.placement`, `router.table.multicast`) take it as it
is."""

from __future__ import annotations

from dataclasses import dataclass, field

from router.table.routing import NO_DEST, Entry, Policy


@dataclass
class TableState:
    """One management table's contents (send side or receive side)."""

    destinations: list[str]
    policy: Policy = "share"
    max_staged: int = 10_000  # whole-group delivery: parks before a staged group streams
    homes: int = 0  # lanes' home destinations (`router.table.choice.home`): 0 off, else cells
    entries: dict[str, Entry] = field(default_factory=dict)
    load: dict[str, int] = field(default_factory=dict)
    cursor: int = 0
    # (destination, batch ID) -> lease expiry: ordinary messages routed, not yet committed
    inflight: dict[tuple[str, str], int] = field(default_factory=dict)
    room: dict[str, int] = field(default_factory=dict)  # waiting group -> wait start (ms)
    # (group, batch ID) -> lease expiry: messages parked in the room, not yet committed
    park_leases: dict[tuple[str, str], int] = field(default_factory=dict)
    # logical order: finished group -> (next number, expiry): a later member below the
    # number is a duplicate (DUPLICATE) until then
    done: dict[str, tuple[int, int]] = field(default_factory=dict)
    draining: set[str] = field(default_factory=set)  # `router.table.placement`
    # wait time-outs under policy "report": the wait start up to which they were reported
    reported_upto: int | None = None

    def unload(self, dest: str) -> None:
        if dest != NO_DEST:
            self.load[dest] -= 1
            if self.load[dest] == 0:
                del self.load[dest]
