"""A sender's open groups as it records them durably, and how they resume (pure).

`Sender(..., sender_id=...)` keeps one `GroupRecord` per open group in Redis
(`router.state.store`): its lane (send queue and partition), where on that partition its
unconfirmed members can be (`scan_from`), and the last member Kafka acknowledged. The
order of writes is what makes a crash harmless:

1. A new group's record is written **before** its first member is produced (write-ahead):
   a group that may be on a partition is always in the state, with its lane.
2. Acknowledged members move `acked_seq`/`scan_from` forward lazily (once a second and on
   `flush()`): they only shorten the scan below.
3. A group's record is removed only **after** its final was acknowledged.

So the state never says which sequence numbers reached Kafka; the partition does. A sender
restarted with the same ID reads each lane from its groups' `scan_from` to the end
(`router.sender.tailprobe`) and `resume` finds, per group, the highest member there: the next
number is one above it. A member whose delivery was unknown at the crash is counted if it
landed, and not if it did not, so no number is used twice or skipped. `scan_from` is a
safe lower bound: an end offset measured before the member was produced, or one past an
acknowledged member of the group.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One open group as the state holds it. `token` tells this opening of the group
    from an earlier one under the same ID (a late checkpoint never touches a newer one)."""

    gid: str
    topic: str
    partition: int
    token: str
    scan_from: int  # no unacknowledged member of the group is below this offset
    acked_seq: int = -1  # the highest member acknowledged at `scan_from - 1` (-1: none)
    next_seq: int = 0  # as of the last write (a hint: the partition has the truth)
    opened_ms: int = 0  # wall clock, for `Sender.open_groups()` ages
    logical: bool = False  # logical order: `scan_from` stays at the group's start

    @property
    def tp(self) -> TP:
        """The group's lane: (send queue, partition)."""
        return (self.topic, self.partition)

    def encode(self) -> str:
        """The record as stored (JSON, without the ID: the hash field is the ID)."""
        doc = asdict(self)
        del doc["gid"]
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def decode(cls, gid: str, raw: str | bytes) -> GroupRecord:
        """The record of group `gid` as `encode` stored it."""
        doc = json.loads(raw)
        return cls(gid=gid, **doc)

    def acknowledged(self, seq: int, offset: int) -> GroupRecord:
        """The record once member `seq` was acknowledged at `offset` (kept as it is for a
        logical-order group, whose probe must see all its members, and for an older ack)."""
        if self.logical or seq <= self.acked_seq:
            return self
        return replace(
            self, acked_seq=seq, scan_from=offset + 1, next_seq=max(self.next_seq, seq + 1)
        )


@dataclass(frozen=True, slots=True)
class TailRecord:
    """One record of the group found on its lane at or after `scan_from`."""

    offset: int
    seq: int | None
    final: bool


@dataclass(frozen=True, slots=True)
class Resumed:
    """What the partition says about a recorded group: `finished` (its final is there),
    else the `next_seq` to send, the numbers already sent (`sent`) and any `gaps` (numbers
    missing below the highest one: a delivery that failed before the crash)."""

    record: GroupRecord
    finished: bool
    next_seq: int
    sent: frozenset[int] = field(default_factory=frozenset)
    gaps: tuple[int, ...] = ()


def resume(record: GroupRecord, tail: Iterable[TailRecord]) -> Resumed:
    """The group's state after a restart, from its members found on its lane at or
    after `record.scan_from`, in offset order. A final followed by a member numbered 0
    is an earlier group under the same ID (the scan may start before this one opened):
    what came before that member is forgotten."""
    seen: list[TailRecord] = []
    for t in tail:
        if t.offset < record.scan_from:
            continue
        if seen and seen[-1].final and t.seq in (0, None):
            seen = []  # an earlier opening of the ID ended here
        seen.append(t)
    if seen and seen[-1].final:
        return Resumed(record, True, 0)
    numbers = {t.seq for t in seen if t.seq is not None}
    base = record.acked_seq
    top = max(numbers, default=base)
    next_seq = max(top, base) + 1
    start = 0 if record.logical else base + 1
    gaps = () if record.logical else tuple(n for n in range(start, top) if n not in numbers)
    last = max((t.offset for t in seen), default=record.scan_from - 1)
    moved = replace(record, next_seq=next_seq)
    if not record.logical and top > base:
        moved = replace(moved, acked_seq=top, scan_from=last + 1)
    return Resumed(moved, False, next_seq, frozenset(numbers), gaps)
