"""Logical order (`guarantee-order: logical`): which parked members of a group the drain
step forwards, in sequence order (pure: no I/O). `docs/explanation/logical-order.md`.

The table routes a member straight to its group's destination only while it comes in
sequence from the group's lane; any other member puts the group in the waiting room and is
parked, from whatever send-queue partition or unit. The drain then forwards the parked
members from the next expected number on, as far as they run without a gap. Members
below that number (a producer's retry) are duplicates, members without a readable
sequence number cannot be placed: both are dead-lettered, never forwarded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from router.table.room import at_or_before
from router.unit.steps.drain.index import Parked


@dataclass(slots=True)
class Plan:
    start: int  # the next sequence number before this drain
    next: int  # after it
    forward: list[Parked] = field(default_factory=list)  # in sequence order, no gap
    duplicates: list[Parked] = field(default_factory=list)  # below `next`, or seen twice
    unsequenced: list[Parked] = field(default_factory=list)  # no readable sequence number
    waiting: list[Parked] = field(default_factory=list)  # behind a gap, in sequence order

    @property
    def through(self) -> int:
        """The last offset this drain settles (its marker's), -1 if none."""
        done = [*self.forward, *self.duplicates, *self.unsequenced]
        return max((p.m.offset() for p in done), default=-1)

    @property
    def gap(self) -> tuple[int, int] | None:
        """(first missing number, lowest parked after it) if members wait behind a gap."""
        if not self.waiting:
            return None
        return self.next, min(p.seq for p in self.waiting if p.seq is not None)


def start(parked: list[Parked], table_next: int, marked: int, fence: str) -> int:
    """Where a drain starts: the table's and the last marker's next number, or lower for
    members parked from at or before the fence: those went straight once, in a batch that
    aborted (the drain starts only once the fence's batch is settled), so they were never
    delivered and are replays, not duplicates."""
    at = max(table_next, marked)
    replays = [p.seq for p in parked if p.seq is not None and at_or_before(p.token, fence)]
    return min([at, *replays])


def plan(parked: list[Parked], first: int, skip_gap: bool = False) -> Plan:
    """What to do with a group's parked members (in offset order), starting at `first`;
    `skip_gap`: the gaps are given up on, every parked member goes out in sequence order
    (gap policy deliver)."""
    by_seq: dict[int, Parked] = {}
    copies: list[Parked] = []  # a number seen twice: the first copy in the room wins
    out = Plan(first, first)
    for p in parked:
        if p.seq is None:
            out.unsequenced.append(p)
        elif p.seq < first:
            out.duplicates.append(p)
        elif p.seq in by_seq:
            copies.append(p)
        else:
            by_seq[p.seq] = p
    n = first
    while by_seq:
        if n not in by_seq:
            if not skip_gap:
                break
            n = min(by_seq)  # given up on: what is parked goes out in order, past gaps
        out.forward.append(by_seq.pop(n))
        n += 1
    out.next = n
    # Below `n` now: skipped past (deliver: too late), or a copy of one forwarded. A copy of
    # a waiting member waits too, so that it is dead-lettered once, when its number passes.
    rest = sorted([*by_seq.values(), *copies], key=lambda p: (p.seq, p.m.offset()))
    for p in rest:
        assert p.seq is not None
        (out.duplicates if p.seq < n else out.waiting).append(p)
    return out
