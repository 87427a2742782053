"""What the live status page (`router console`) shows, built by pure functions from the
table views (`router.table.view`) and the processes' published counters
(`router.metrics.registry.read_all`): no I/O here, so it is tested without servers.

`status()` returns one JSON-ready document: per side, each destination with its groups
(ID, state, age, idle time, parked messages), the groups not on a destination (waiting,
staged, stopped before placement), the waiting room's lists, draining destinations and the
table's counters; then dead-letter and expiry totals and per-role throughput.
Throughput is the change of each live process's counters between two readings over the
elapsed monotonic time (`Sample`, `rates`); with no earlier reading it is unknown (None),
never measured against a made-up "long ago".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from router.table.view import EntryView

NO_DESTINATION = "!"  # EntryView.destination of an entry without one
# Counters summed over every live process: dead letters and expiries.
DEAD_LETTER_COUNTERS = ("dead_letters", "parked", "orphans_parked", "seq_duplicates")
EXPIRY_COUNTERS = ("swept", "abandoned_events", "wait_timeouts", "hold_timeouts")
RATE_COUNTERS = ("messages_in", "messages_out")


@dataclass(frozen=True, slots=True)
class SideSnapshot:
    """One side's table as read at one moment."""

    side: str
    destinations: tuple[str, ...]  # every destination of the side, in order
    entries: list[EntryView]
    draining: list[str]
    counters: dict[str, int]  # the table's own (`ManagementTable.stats`)
    waiting: list[str]  # the room's queue, oldest first (pseudo-groups included)
    admitted: dict[str, str]  # admitted group -> destination


@dataclass(frozen=True, slots=True)
class Sample:
    """Every live process's counters, read at `at` (time.monotonic())."""

    at: float
    counters: dict[str, dict[str, int]]  # "<role>:<instance>" -> counters


def role_of(process: str) -> str:
    return process.split(":", 1)[0]


def _group(v: EntryView) -> dict[str, Any]:
    return {
        "guarantee_id": v.guarantee_id,
        "state": v.state,
        "age_s": round(v.age_s, 1),
        "idle_s": round(v.idle_s, 1),
        "expires_in_s": round(v.expires_in_s, 1),
        "parks": v.parks,
        "lane": v.lane,
    }


def side_status(snap: SideSnapshot) -> dict[str, Any]:
    """One side: destinations (in the side's order, then any unknown one an entry names)
    with their groups oldest first, and the groups grouped by state."""
    by_dest: dict[str, list[EntryView]] = {d: [] for d in snap.destinations}
    unplaced: list[EntryView] = []
    for v in snap.entries:
        if v.destination == NO_DESTINATION:
            unplaced.append(v)
        else:
            by_dest.setdefault(v.destination, []).append(v)
    draining = set(snap.draining)
    destinations = [
        {
            "name": d,
            "draining": d in draining,
            "groups": [_group(v) for v in sorted(vs, key=lambda v: (-v.age_s, v.guarantee_id))],
        }
        for d, vs in by_dest.items()
    ]

    def ids(state: str) -> list[str]:
        return sorted(v.guarantee_id for v in snap.entries if v.state == state)

    return {
        "destinations": destinations,
        "unplaced": [_group(v) for v in sorted(unplaced, key=lambda v: (-v.age_s, v.guarantee_id))],
        "open_groups": sum(1 for v in snap.entries if v.destination != NO_DESTINATION),
        "waiting": list(snap.waiting),
        "admitted": dict(sorted(snap.admitted.items())),
        "staged": ids("staged"),
        "stopped": ids("stopped"),
        "closing": ids("closing"),
        "draining": sorted(draining),
        "counters": dict(sorted(snap.counters.items())),
    }


def rates(prev: Sample | None, cur: Sample) -> dict[str, dict[str, float | None]]:
    """Per role, messages per second of each RATE_COUNTERS counter between two samples.
    Only processes present in both count (a new one has no earlier reading; a restarted
    one, whose counters went down, is skipped). None: not measurable yet (no earlier
    sample, no time elapsed, or no process of the role seen twice)."""
    roles = sorted({role_of(p) for p in cur.counters})
    elapsed = None if prev is None else cur.at - prev.at
    out: dict[str, dict[str, float | None]] = {}
    for role in roles:
        per: dict[str, float | None] = {}
        for name in RATE_COUNTERS:
            if prev is None or elapsed is None or elapsed <= 0:
                per[name] = None
                continue
            deltas = [
                c.get(name, 0) - prev.counters[p].get(name, 0)
                for p, c in cur.counters.items()
                if role_of(p) == role
                and p in prev.counters
                and c.get(name, 0) >= prev.counters[p].get(name, 0)
            ]
            per[name] = round(sum(deltas) / elapsed, 1) if deltas else None
        out[role] = per
    return out


def roles(cur: Sample, throughput: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """Per role: live processes, their summed counters that matter here, and throughput."""
    out: dict[str, Any] = {}
    for role in sorted({role_of(p) for p in cur.counters}):
        procs = [c for p, c in cur.counters.items() if role_of(p) == role]
        keep = (*RATE_COUNTERS, *DEAD_LETTER_COUNTERS, *EXPIRY_COUNTERS)
        totals = {n: sum(c.get(n, 0) for c in procs) for n in keep}
        out[role] = {
            "processes": len(procs),
            "totals": {n: v for n, v in totals.items() if v},
            "per_s": throughput.get(role, {}),
        }
    return out


def status(
    topology: str,
    sides: list[SideSnapshot],
    cur: Sample,
    prev: Sample | None,
    errors: list[str] | None = None,
) -> dict[str, Any]:
    """The whole page's data (`/api/status`)."""
    procs = cur.counters.values()
    swept_by_tables = sum(s.counters.get("swept", 0) for s in sides)
    return {
        "topology": topology,
        "sides": {s.side: side_status(s) for s in sides},
        "dead_letters": {n: sum(c.get(n, 0) for c in procs) for n in DEAD_LETTER_COUNTERS},
        "expiries": {
            "table_swept": swept_by_tables,
            **{n: sum(c.get(n, 0) for c in procs) for n in EXPIRY_COUNTERS},
        },
        "roles": roles(cur, rates(prev, cur)),
        "errors": list(errors or []),
    }
