"""The routing decision of the patent, as a pure model over a table snapshot (no I/O).

This is the specification. The Redis adapter (`router.table`, scripts in `router/lua/`)
implements the same rules atomically inside Redis; a property test runs both side by
side on random histories and requires identical decisions and tables.

Rules, for each message of a batch, in order:

* Known group (its guarantee ID has an entry) -> the entry's destination. The entry's
  update time is refreshed (and its TTL set from this message). A final message marks the
  entry *closing* with the message's source position; the entry is removed only by
  `release` with that same position, after the forwarded final is committed in Kafka. A
  non-final message of a closing group (the ID reused) clears the mark, so the pending
  release no longer matches.
* New group -> a *clean* destination: in charge of no open group, and with no ordinary
  message of another batch in flight to it (see below); recorded as a new entry.
* Ordinary message (no guarantee ID) -> a destination in charge of no open group; no
  entry. All ordinary messages of one batch go to one destination while it stays free,
  and that destination is *in flight* for the batch (a lease in the table) until the
  unit settles the batch after its Kafka commit, or the lease expires (the unit died).
  Without this fence, an ordinary message decided before a new group took the same free
  destination could be appended after the group's first message: an interleaving.
* Within a batch, a destination whose open groups all had their final message routed
  earlier in the same batch counts as free: the batch is one transaction from one
  producer, so what it sends there next is appended after those finals, and if the
  batch aborts, the replay finds the same entries. (Other batches still see it busy
  until the batch commits and settles.)
* Choosing among candidates: a destination's cost is its load (number of open groups
  not closed earlier in this batch) and, for a new group, whether another batch has it
  in flight. The cheapest are the
  candidates; the first candidate at or after a rotating cursor wins and the cursor moves
  past it. Deterministic, and it spreads batches and groups over the free destinations.
* No destination free (new group: none clean; ordinary: every one in charge of a group):
  policy "share" takes the cheapest candidate anyway (counted as shared); policy "hold"
  answers HELD and every later message from the same lane (source partition) in this
  batch answers SKIPPED, so the unit can stop that partition at the held offset. A
  request with `force_share` (its hold timed out) is shared regardless of policy.
* Poison and orphans (the unit decides what is bad; the table keeps groups whole):
  - a request with `dead` (a bad message of a group under the dead-letter policy) is
    routed like a non-final message, so its group keeps its entry and continues; the unit
    dead-letters the message itself;
  - a request with `poison_stop` (a bad message under the stop-group policy) marks its
    group's entry stopped (creating one without a destination if the group is new) and
    answers PARKED; every later message of a stopped group answers PARKED too, so the
    unit parks them in order and forwards nothing more of that group;
  - a request with `continuation` (sequence number > 0) for a group with no entry answers
    ORPHAN and creates nothing: its entry expired or the table was lost, and routing it as
    a new group could send the rest of the group to another destination.
* `sweep(now)` removes entries idle past their TTL (now > update time + TTL), oldest
  deadline first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

HELD = "!h"
SKIPPED = "!s"
PARKED = "!p"  # a message of a stopped group
ORPHAN = "!o"  # a continuation of a group that has no entry
STOPPED = "!stop"  # Entry.closing of a stopped group
NO_DEST = "!"  # Entry.dest of a group stopped before it had a destination

Policy = Literal["share", "hold"]


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """One message, as the table sees it."""

    guarantee_id: str | None
    final: bool
    ttl_ms: int
    token: str  # source position "topic/partition/offset": identifies a final's release
    lane: str  # source partition "topic/partition"
    force_share: bool = False
    dead: bool = False  # a bad message of this group, dead-lettered (group continues)
    poison_stop: bool = False  # a bad message of this group, which stops the group
    continuation: bool = False  # sequence number > 0: the group must already have an entry


@dataclass(slots=True)
class Entry:
    dest: str
    opened_ms: int
    updated_ms: int
    ttl_ms: int
    closing: str = ""  # source position of the routed final message, "" while open

    @property
    def deadline_ms(self) -> int:
        return self.updated_ms + self.ttl_ms


@dataclass(frozen=True, slots=True)
class RouteResult:
    decisions: list[str]  # a destination name, HELD or SKIPPED, one per request
    shared: int  # placed on a busy destination (policy share, or a hold that timed out)
    held: int
    created: int  # new entries
    stopped: int = 0  # groups stopped by a poison message
    orphans: int = 0  # continuations without an entry


@dataclass(frozen=True, slots=True)
class TraceStep:
    """What the table looked like when one request was decided (for property tests)."""

    request: RouteRequest
    decision: str
    known: bool  # the group already had an entry
    free: frozenset[str]  # in charge of no open group (except ones closed in this batch)
    clean: frozenset[str]  # free, and no other batch's ordinary messages in flight


@dataclass(frozen=True, slots=True)
class Swept:
    guarantee_id: str
    entry: Entry
    swept_ms: int


@dataclass
class TableModel:
    """One management table (send side or receive side)."""

    destinations: list[str]
    policy: Policy = "share"
    entries: dict[str, Entry] = field(default_factory=dict)
    load: dict[str, int] = field(default_factory=dict)
    cursor: int = 0
    # (destination, batch ID) -> lease expiry: ordinary messages routed, not yet committed
    inflight: dict[tuple[str, str], int] = field(default_factory=dict)

    def _choose(self, fenced: set[str], freed: Counter[str]) -> tuple[int, bool]:
        """(index of the chosen destination, whether it is busy)."""
        n = len(self.destinations)
        cost = [(self.load.get(d, 0) - freed[d], d in fenced) for d in self.destinations]
        best = min(cost)
        for k in range(n):
            i = (self.cursor + k) % n
            if cost[i] == best:
                return i, best != (0, False)
        raise AssertionError("unreachable: some destination has the minimum cost")

    def route(
        self,
        requests: Sequence[RouteRequest],
        now_ms: int,
        batch: str = "batch",
        lease_ms: int = 15_000,
        trace: list[TraceStep] | None = None,
    ) -> RouteResult:
        self.inflight = {k: exp for k, exp in self.inflight.items() if exp > now_ms}
        fenced = {d for (d, b) in self.inflight if b != batch}
        decisions: list[str] = []

        freed: Counter[str] = Counter()  # groups per destination closed in this batch
        closed_here: set[str] = set()

        def record(r: RouteRequest, known: bool) -> None:
            if trace is not None:
                free = frozenset(
                    d for d in self.destinations if self.load.get(d, 0) - freed[d] == 0
                )
                trace.append(TraceStep(r, decisions[-1], known, free, free - fenced))

        held_lanes: set[str] = set()
        shared = held = created = stopped = orphans = 0
        batch_dest: str | None = None
        for r in requests:
            if r.lane in held_lanes:
                decisions.append(SKIPPED)
                continue
            gid = r.guarantee_id
            entry = self.entries.get(gid) if gid is not None else None
            if entry is not None:
                assert gid is not None
                entry.updated_ms = now_ms
                if entry.closing == STOPPED:
                    decisions.append(PARKED)
                    record(r, True)
                    continue
                if r.poison_stop:
                    if gid in closed_here:
                        closed_here.discard(gid)
                        freed[entry.dest] -= 1
                    entry.closing = STOPPED
                    stopped += 1
                    decisions.append(PARKED)
                    record(r, True)
                    continue
                entry.ttl_ms = r.ttl_ms
                decisions.append(entry.dest)
                record(r, True)
                if r.final and not r.dead:
                    entry.closing = r.token
                    if gid not in closed_here:
                        closed_here.add(gid)
                        freed[entry.dest] += 1
                elif entry.closing:
                    entry.closing = ""
                    if gid in closed_here:  # the ID reused in this very batch
                        closed_here.discard(gid)
                        freed[entry.dest] -= 1
                continue
            if gid is not None and r.continuation:
                orphans += 1
                decisions.append(ORPHAN)
                record(r, False)
                continue
            if gid is not None and r.poison_stop:
                self.entries[gid] = Entry(NO_DEST, now_ms, now_ms, r.ttl_ms, STOPPED)
                stopped += 1
                decisions.append(PARKED)
                record(r, False)
                continue
            ordinary = r.guarantee_id is None
            if (
                ordinary
                and batch_dest is not None
                and self.load.get(batch_dest, 0) - freed[batch_dest] == 0
            ):
                decisions.append(batch_dest)
                record(r, False)
                continue
            index, busy = self._choose(set() if ordinary else fenced, freed)
            if busy and self.policy == "hold" and not r.force_share:
                held += 1
                held_lanes.add(r.lane)
                decisions.append(HELD)
                record(r, False)
                continue
            if busy:
                shared += 1
            dest = self.destinations[index]
            decisions.append(dest)
            record(r, False)
            self.cursor = (index + 1) % len(self.destinations)
            if ordinary:
                batch_dest = dest
                self.inflight[(dest, batch)] = now_ms + lease_ms
            else:
                assert r.guarantee_id is not None
                final = r.final and not r.dead
                self.entries[r.guarantee_id] = Entry(
                    dest, now_ms, now_ms, r.ttl_ms, r.token if final else ""
                )
                self.load[dest] = self.load.get(dest, 0) + 1
                created += 1
                if final:
                    closed_here.add(r.guarantee_id)
                    freed[dest] += 1
        return RouteResult(decisions, shared, held, created, stopped, orphans)

    def settle(self, batch: str, dests: Iterable[str], finals: Iterable[tuple[str, str]]) -> int:
        """After a batch's commit: end its in-flight leases and release its finals."""
        for d in dests:
            self.inflight.pop((d, batch), None)
        return self.release(finals)

    def _remove(self, gid: str) -> Entry:
        entry = self.entries.pop(gid)
        if entry.dest != NO_DEST:
            self.load[entry.dest] -= 1
            if self.load[entry.dest] == 0:
                del self.load[entry.dest]
        return entry

    def release(self, finals: Iterable[tuple[str, str]]) -> int:
        """Remove entries whose routed final (gid, token) is now committed in Kafka.

        The token "*" (an operator's manual release) matches any entry."""
        released = 0
        for gid, token in finals:
            entry = self.entries.get(gid)
            if entry is not None and token in (entry.closing, "*"):
                self._remove(gid)
                released += 1
        return released

    def sweep(self, now_ms: int, limit: int | None = None) -> list[Swept]:
        """Remove entries idle past their TTL, oldest deadline first (ties by ID)."""
        expired = sorted(
            (e.deadline_ms, gid) for gid, e in self.entries.items() if e.deadline_ms < now_ms
        )
        if limit is not None:
            expired = expired[:limit]
        return [Swept(gid, self._remove(gid), now_ms) for _, gid in expired]

    def open_groups(self, dest: str) -> int:
        return self.load.get(dest, 0)
