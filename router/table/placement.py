"""Operators' steering of placement, as pure rules over the table model (no I/O).

Two rules, which the route script (`router/table/store/lua/route.lua`, `pin.lua`) applies the same
way and the property test checks side by side (`docs/explanation/routing.md`, "Steering placement"):

* **Draining** destinations (the table's `draining` set) take no new group and no
  ordinary message: choosing a destination, admitting a waiting group and ending a
  wait skip them. Groups already open there continue and finish. If every destination
  is draining, none is treated as draining (nothing stops; the route script counts it
  as `drain_ignored` in the table's counters, and `router table drain` warns).
* A **pinned** entry (`router table pin`) is created for a new group before its first
  message: state PINNED, the pinned destination, no lane, counted in the destination's
  load from then on. The group's first message finds it and makes it an ordinary open
  entry on its lane (in logical order, with sequence numbers from 0), so the message is
  routed there like any known group's: never held, shared or made to wait for a
  destination. Until then it holds its destination like an open group, and is swept at
  its TTL like any idle entry.
"""

from __future__ import annotations

from router.table.routing import Entry, RouteRequest
from router.table.state import TableState

PINNED = "pinned"  # Entry.state of a pinned entry before its group's first message


def excluded(destinations: list[str], draining: set[str]) -> set[str]:
    """The destinations no new group or ordinary message may be placed on: the draining
    ones, unless every destination is draining (then none)."""
    out = draining & set(destinations)
    return set() if out >= set(destinations) else out


def pin(t: TableState, gid: str, dest: str, ttl_ms: int, now_ms: int) -> bool:
    """Create a pinned entry for a group with none: False (nothing changed) if it has one.
    The caller checks that `dest` is one of the side's destinations."""
    if dest not in t.destinations:
        raise ValueError(f"{dest!r} is not a destination of this table")
    if gid in t.entries:
        return False
    t.entries[gid] = Entry(dest, now_ms, now_ms, ttl_ms, "", "", PINNED)
    t.load[dest] = t.load.get(dest, 0) + 1
    return True


def first_message(entry: Entry, r: RouteRequest) -> None:
    """A pinned group's first message: the entry becomes an ordinary open one (its lane is
    set by the known group's rule); in logical order it expects sequence number 0 first,
    like a group parked as new (`router.table.room.sequence`)."""
    entry.state = "open"
    if r.seq is not None:
        entry.next, entry.origin = 0, r.token
