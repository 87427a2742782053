"""What one refresh of the console reads, as plain data: each side's table (`SideSnapshot`)
and every live process's published counters (`Sample`), with the throughput measured
between two samples (`rates`). Pure: no I/O, tested without servers."""

from __future__ import annotations

from dataclasses import dataclass

from router.table.view import EntryView

NO_DESTINATION = "!"  # EntryView.destination of an entry without one
# Counters summed over every live process: dead letters and expiries.
DEAD_LETTER_COUNTERS = ("dead_letters", "parked", "orphans_parked", "seq_duplicates")
EXPIRY_COUNTERS = ("swept", "abandoned_events", "wait_timeouts", "hold_timeouts", "expired")
RATE_COUNTERS = ("messages_in", "messages_out")

Rates = dict[str, dict[str, float | None]]  # role -> counter -> per second (None: unknown)


@dataclass(frozen=True, slots=True)
class SideSnapshot:
    """One side's table as read at one moment."""

    side: str
    destinations: tuple[str, ...]  # every destination of the side, in order
    entries: list[EntryView]
    draining: list[str]
    counters: dict[str, int]  # the table's own (`ManagementTable.stats`)
    room: dict[str, int]  # the room's queue -> wait start (ms), oldest first (pseudo-groups too)
    admitted: dict[str, str]  # admitted group -> destination
    now_ms: int = 0  # the Redis clock when read


@dataclass(frozen=True, slots=True)
class Sample:
    """Every live process's counters, read at `at` (time.monotonic())."""

    at: float
    counters: dict[str, dict[str, int]]  # "<role>:<instance>" -> counters


def role_of(process: str) -> str:
    return process.split(":", 1)[0]


def rates(prev: Sample | None, cur: Sample) -> Rates:
    """Per role, messages per second of each RATE_COUNTERS counter between two samples.
    Only processes present in both count (a new one has no earlier reading; a restarted
    one, whose counters went down, is skipped). None: not measurable yet (no earlier
    sample, no time elapsed, or no process of the role seen twice)."""
    roles = sorted({role_of(p) for p in cur.counters})
    elapsed = None if prev is None else cur.at - prev.at
    out: Rates = {}
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
