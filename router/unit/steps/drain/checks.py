"""The drain step's checks: when an admitted group may switch to open
(`router.table.room.drained`). A group the batch neither drained nor held back gets a check
once no park of it is in flight: its park count and its room partition's end offset, read
after that. Once the unit has read past that end offset, nothing of the group can still
come out of the room, and the switch goes to the settle (unless the group parked
meanwhile: the table compares the park count)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from router.table import room
from router.table.routing import RoomState
from router.topology.cells import room_partition
from router.unit.steps.batch import TP
from router.unit.steps.drain import writes as drainwrite
from router.unit.steps.drain.context import Draining
from router.unit.steps.emit.records import Output


@dataclass(slots=True)
class Check:
    """A pending switch of an admitted group to open: the park count read with no park
    lease in flight, and the room partition's end offset read after it."""

    tp: TP
    parks: int
    end: int
    next: int = -1  # logical order: the next sequence number once open


class Checking(Draining, Protocol):
    """What the checks read of the drain besides what its writes do (`Draining`)."""

    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> int | Sequence[int]: ...
    @property
    def owned(self) -> set[TP]: ...
    @property
    def catch_up(self) -> Mapping[TP, int | None]: ...
    @property
    def checks(self) -> dict[str, Check]: ...


def advance(
    d: Checking,
    states: Mapping[str, RoomState],
    skip: set[str],
    positions: Mapping[TP, int],
    out: Output,
    end: Callable[[TP], int | None],
) -> None:
    """Take, keep or complete the check of each admitted group in `states` but those in
    `skip` (drained or held back in this batch: their checks are dropped)."""
    checks = d.checks
    for gid, state in states.items():
        if state.state != room.ADMITTED or gid in skip:
            checks.pop(gid, None)
            continue
        check = checks.get(gid)
        if check is None:
            tp = (d.topic, room_partition(gid, d.partitions))
            if state.leased or tp not in d.owned or tp in d.catch_up:
                continue  # a park in flight: not yet
            at = end(tp)
            if at is None:
                continue  # the broker cannot say now: checked again next batch
            nxt = state.next
            if nxt >= 0:
                nxt = max(nxt, d.index.drained_to(tp, gid, state.origin))
            checks[gid] = Check(tp, state.parks, at, nxt)
        elif check.end == 0 or positions.get(check.tp, -1) >= check.end:
            # opens it, unless parked meanwhile
            drainwrite.drained(d, out, check.tp, (gid, check.parks, check.next))
            del checks[gid]
