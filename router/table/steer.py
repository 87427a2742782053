"""Steer a management table: the library behind `router table pin|drain|undrain|evict|release`
(reads: `router.table.view`).

Steering (`pin`, `drain`, `undrain`, `evict`,
`release`) over one side's `ManagementTable`. Every steering action has a `plan_*`
function first: what it will do, its consequences and warnings, computed without changing
anything; refusals (an unknown destination, a group that already has an entry) raise
`SteerError`. The rules the route script applies are in `router.table.placement`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from router.errors import RouterError
from router.table import room
from router.table.store.management import ManagementTable
from router.table.view import state_of


class SteerError(RouterError):
    """A steering action refused: nothing was changed."""


# ---------------------------------------------------------------------- plans


@dataclass(frozen=True, slots=True)
class Plan:
    """What a steering action will do, before it does it."""

    action: str
    side: str
    target: str
    does: list[str]
    consequences: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # the guarantee IDs it concerns

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _destination(t: ManagementTable, side: str, dest: str) -> None:
    if dest not in t.destinations:
        raise SteerError(
            f"{dest!r} is not a destination of the {side} table: one of {', '.join(t.destinations)}"
        )


def _on(t: ManagementTable, dest: str) -> list[str]:
    return sorted(g for g, e in t.entries().items() if e.dest == dest)


def plan_pin(t: ManagementTable, side: str, gid: str, dest: str, ttl_ms: int) -> Plan:
    _destination(t, side, dest)
    if not gid or room.is_pseudo(gid):
        raise SteerError(f"invalid guarantee ID {gid!r}")
    e = t.entry(gid)
    if e is not None:
        raise SteerError(
            f"{gid!r} already has an entry in the {side} table ({state_of(e)} on {e.dest}):"
            " only a new group can be pinned"
        )
    warnings = []
    busy = t.loads().get(dest, 0)
    if busy:
        warnings.append(f"{dest} is in charge of {busy} open group(s): they will be interleaved")
    if dest in t.draining():
        warnings.append(f"{dest} is draining: the pinned group goes there all the same")
    return Plan(
        "pin",
        side,
        dest,
        [f"create a pinned entry {gid!r} -> {dest} (TTL {ttl_ms / 1000:g} s)"],
        [
            f"the group's first message goes to {dest}, whatever the busy policy, and the group"
            " stays there until its final is released",
            f"{dest} counts it as an open group from now: no new group is placed there",
            "if no message of the group comes within the TTL, the sweeper removes the entry"
            " (an AbandonedGroup event)",
        ],
        warnings,
        [gid],
    )


def pin(t: ManagementTable, side: str, gid: str, dest: str, ttl_ms: int) -> None:
    if not t.pin(gid, dest, ttl_ms):
        raise SteerError(f"{gid!r} got an entry in the {side} table meanwhile: not pinned")


@dataclass(frozen=True, slots=True)
class DrainStatus:
    side: str
    destination: str
    draining: bool
    open_groups: list[str]  # entries on it (open, closing, admitted, pinned, stopped)
    inflight: int  # batches with ordinary messages in flight to it, not yet settled
    all_draining: bool  # every destination drains: none is treated as draining

    @property
    def idle(self) -> bool:
        return not self.open_groups and not self.inflight

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "idle": self.idle}


def status(t: ManagementTable, side: str, dest: str) -> DrainStatus:
    _destination(t, side, dest)
    draining = t.draining()
    inflight = sum(1 for d, _ in t.inflight() if d == dest)
    every = set(t.destinations) <= draining
    return DrainStatus(side, dest, dest in draining, _on(t, dest), inflight, every)


def plan_drain(t: ManagementTable, side: str, dest: str) -> Plan:
    s = status(t, side, dest)
    others = set(t.destinations) - t.draining() - {dest}
    warnings = (
        []
        if others
        else [
            "every destination would be draining: then none is treated as draining (nothing"
            " stops; counted as drain_ignored in the table's counters) until one is undrained"
        ]
    )
    if s.draining:
        warnings.append(f"{dest} is already draining")
    return Plan(
        "drain",
        side,
        dest,
        [f"mark {dest} draining: no new group and no ordinary message is placed there"],
        [
            f"{len(s.open_groups)} group(s) open there continue and finish there",
            "new groups and ordinary messages go to the other destinations (fewer"
            " destinations: the busy policy applies sooner)",
            f"`router table undrain {dest} --side {side} --yes` ends it",
        ],
        warnings,
        s.open_groups,
    )


def drain(t: ManagementTable, side: str, dest: str) -> DrainStatus:
    _destination(t, side, dest)
    t.drain(dest)
    return status(t, side, dest)


def plan_undrain(t: ManagementTable, side: str, dest: str) -> Plan:
    _destination(t, side, dest)
    warnings = [] if dest in t.draining() else [f"{dest} is not draining"]
    return Plan(
        "undrain",
        side,
        dest,
        [f"end the drain of {dest}: new groups and ordinary messages may go there again"],
        ["waiting groups (policy wait) may be admitted to it at the next routing call"],
        warnings,
    )


def undrain(t: ManagementTable, side: str, dest: str) -> bool:
    _destination(t, side, dest)
    return t.undrain(dest)


def wait_drained(
    t: ManagementTable,
    side: str,
    dest: str,
    timeout_s: float,
    progress: Callable[[DrainStatus], None] = lambda _: None,
    interval_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainStatus:
    """Until nothing is open or in flight on `dest` (returned, `idle`), or `timeout_s`
    has passed (returned as it is then); `progress` gets each status read."""
    deadline = clock() + timeout_s
    while True:
        s = status(t, side, dest)
        progress(s)
        if s.idle or clock() >= deadline:
            return s
        sleep(max(0.0, min(interval_s, deadline - clock())))


def plan_evict(t: ManagementTable, side: str, dest: str) -> Plan:
    _destination(t, side, dest)
    gids = _on(t, dest)
    warnings = (
        []
        if dest in t.draining()
        else [f"{dest} is not draining: new groups may be placed there again at once"]
    )
    return Plan(
        "evict",
        side,
        dest,
        [f"remove the {len(gids)} entr{'y' if len(gids) == 1 else 'ies'} on {dest}"],
        [
            "later messages of these groups start new assignments, possibly on another"
            " destination: a group still sending is split (its receiver sees it on two"
            " destinations, the rest without the start)",
            "continuations with a sequence number (guarantee-seq > 0) find no entry and are"
            " dead-lettered as group-entry-missing; so are messages of evicted groups parked"
            " in the waiting room",
            "finals already routed are not undone: a group whose final is in flight is"
            " simply released early",
        ],
        warnings,
        gids,
    )


def evict(t: ManagementTable, dest: str, gids: list[str]) -> int:
    """Remove the entries of `gids` that are still on `dest` (one atomic call)."""
    return t.release([(g, "@" + dest) for g in gids])


def plan_release(t: ManagementTable, side: str, gid: str) -> Plan:
    e = t.entry(gid)
    if e is None:
        raise SteerError(f"no entry for {gid!r} in the {side} table")
    return Plan(
        "release",
        side,
        e.dest,
        [f"remove the entry {gid!r} ({state_of(e)} on {e.dest})"],
        [
            "its destination is freed; later messages of the group are routed as a new"
            " group (possibly elsewhere): use it only for a group known to be dead",
        ],
        [],
        [gid],
    )


def release(t: ManagementTable, gid: str) -> int:
    return t.release([(gid, "*")])
