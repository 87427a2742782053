"""The management tables at rest (pure logic, no I/O): what one side's table still holds
once a run delivered everything and every unit stopped.

At rest nothing is in flight, so a table in order holds no group (every final was
delivered and released; a group timed out or swept is gone too), nothing in the waiting
room, admitted or closing, nothing in the sweeper's outbox, no destination with a load,
and no lease (a batch's, or a park's) still live. What may stay: the epoch and write
counters, the finished groups of logical order until their expiry, the priority bands'
memory of groups, lane owners, the writers, statistics. A leftover is a table a zombie
or a lost write left wrong: a destination the router would keep counting busy, a group
that would wait behind nothing. Read from Redis by `ops.harness.scenarios.table_dump`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# keys that must be empty at rest, and those whose members carry an expiry (ms) as score
EMPTY = ("entries", "room", "admitted", "closing", "outbox", "waits_out")
LEASES = ("inflight", "parks")
EXAMPLES = 3


@dataclass(frozen=True)
class Snapshot:
    """One side's table as read, each key as (member, value) pairs, text: a hash's
    (field, value), a zset's (member, score), a list's (item, ""); a key absent: no pairs."""

    side: str
    keys: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)


@dataclass
class RestReport:
    side: str
    leftovers: dict[str, int] = field(default_factory=dict)  # key name -> how many
    examples: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.leftovers

    def line(self) -> str:
        if self.clean:
            return f"{self.side} clean"
        return f"{self.side}: " + ", ".join(f"{n} {k}" for k, n in sorted(self.leftovers.items()))


def at_rest(snapshot: Snapshot, now_ms: int) -> RestReport:
    """What `snapshot` holds that a table at rest must not (see the module's docstring)."""
    report = RestReport(snapshot.side)
    for name in EMPTY:
        members = snapshot.keys.get(name, ())
        if members:
            report.leftovers[name] = len(members)
            report.examples += [
                f"{snapshot.side} {name}: {m}" + (f" = {v}" if v else "")
                for m, v in members[:EXAMPLES]
            ]
    busy = [(d, n) for d, n in snapshot.keys.get("load", ()) if _number(n) != 0]
    if busy:
        report.leftovers["load"] = len(busy)
        report.examples += [f"{snapshot.side} load: {d}={n}" for d, n in busy[:EXAMPLES]]
    for name in LEASES:
        live = [(m, s) for m, s in snapshot.keys.get(name, ()) if _number(s) > now_ms]
        if live:
            report.leftovers[f"live {name}"] = len(live)
            report.examples += [
                f"{snapshot.side} {name}: {m} live for {_number(s) - now_ms:.0f} ms"
                for m, s in live[:EXAMPLES]
            ]
    return report


def _number(x: str) -> float:
    try:
        return float(x)
    except ValueError:
        return float("nan")
