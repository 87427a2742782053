"""One route call's running state on the pure table model (no I/O): what the batch routed so
far that the next request's rules read (`router.table.model`, `router.table.known`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from router.table.routing import HELD, RouteRequest, TraceStep
from router.table.state import TableState


@dataclass
class RouteCall:
    """The decisions of one call, and what its earlier requests changed for the later ones."""

    t: TableState
    batch: str
    now_ms: int
    lease_ms: int
    fenced: set[str]  # destinations with another batch's ordinary messages in flight
    skip: set[str]  # draining: neither free nor clean for anything new
    trace: list[TraceStep] | None = None
    decisions: list[str] = field(default_factory=list)
    # Groups per destination whose final was routed earlier in this batch, in all and per
    # (destination, lane) of the final.
    freed: Counter[str] = field(default_factory=Counter)
    freed_lane: Counter[tuple[str, str]] = field(default_factory=Counter)
    closed_here: dict[str, tuple[str, str]] = field(default_factory=dict)  # gid -> (dest, lane)
    taken: set[str] = field(default_factory=set)  # destinations a new group took after a final
    held_lanes: set[str] = field(default_factory=set)
    shared: int = 0
    created: int = 0
    stopped: int = 0
    orphans: int = 0

    def close(self, gid: str, dest: str, lane: str) -> None:
        if gid not in self.closed_here:
            self.closed_here[gid] = (dest, lane)
            self.freed[dest] += 1
            self.freed_lane[(dest, lane)] += 1

    def reopen(self, gid: str) -> None:
        if gid in self.closed_here:
            dest, lane = self.closed_here.pop(gid)
            self.freed[dest] -= 1
            self.freed_lane[(dest, lane)] -= 1

    def decide(self, r: RouteRequest, decision: str, known: bool) -> None:
        """Append the request's decision, and what the table looked like (when tracing)."""
        self.decisions.append(decision)
        if self.trace is None:
            return
        load, ds = self.t.load, [d for d in self.t.destinations if d not in self.skip]
        free = frozenset(d for d in ds if load.get(d, 0) == self.freed[d])
        lane_free = {d for d in ds if load.get(d, 0) == self.freed_lane[(d, r.lane)]}
        clean = frozenset(lane_free - self.fenced)
        self.trace.append(TraceStep(r, decision, known, free, clean, frozenset(self.skip)))

    def hold(self, r: RouteRequest, known: bool) -> None:
        """HELD: the request's lane routes nothing more in this batch."""
        self.held_lanes.add(r.lane)
        self.decide(r, HELD, known)
