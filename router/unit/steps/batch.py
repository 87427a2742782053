"""The batch a unit handles, as one value that the steps fill in turn (no I/O here).

classify -> items, with bad input marked; route -> a decision per item, held partitions,
the table's epoch; emit -> the records to produce (`router.unit.steps.emit.emitter.Output`). Offsets
travel with the batch: `first` says where each source partition rewinds to if the batch fails,
`resume_offsets()` what its transaction commits. `routed_at` and `lease_until` say how long the
leases of its ordinary messages' destinations last (`router.unit.commit.leases`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message, TopicPartition

from router.contract.headers import BadInput, Routing

TP = tuple[str, int]


def where(m: Message) -> str:
    """A message's position as logs name it: topic[partition]@offset."""
    return f"{m.topic()}[{m.partition()}]@{m.offset()}"


@dataclass(slots=True)
class Item:
    """One consumed message, as the steps see it."""

    m: Message
    headers: list[tuple[str, bytes | None]] | None
    routing: Routing | None  # None: bad input
    bad: BadInput | None = None
    stop: bool = False  # bad, and its group's policy is stop-group
    close: bool = False  # a close marker from the send side (receive side only)
    skip: bool = False  # a skip marker from the send side (receive side only)
    decision: str | None = None  # the route step's answer; None: not part of the table call
    # when its lifetime ends (router.contract.lifetime), if it has one
    expires_ms: int | None = None
    targets: tuple[str, ...] | None = None  # multicast: its receive queues (router.table.multicast)


@dataclass(slots=True)
class Batch:
    id: str
    generation: int  # the transactional session's generation when it was polled
    items: list[Item] = field(default_factory=list)
    first: dict[TP, int] = field(default_factory=dict)
    last: dict[TP, int] = field(default_factory=dict)
    # Set by the route step.
    held_at: dict[TP, int] = field(default_factory=dict)  # partition -> its held offset
    table_reset: tuple[str, str] | None = None  # (previous epoch, new epoch)
    failure: str | None = None  # why nothing of it may be produced (e.g. Redis away)
    routed_at: float | None = None  # time.monotonic() just before the table call
    # Set by the unit (`router.unit.commit.leases`): when its ordinary messages' leases end, by the
    # unit's clock, less a safety margin.
    lease_until: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # step-specific notes
    # Set by the unit: its batch in flight (overlapped commit) and that batch's finals, which
    # land before this batch's records (`router.table.store.management.ManagementTable.route`).
    earlier: list[str] = field(default_factory=list)
    carried: list[tuple[str, str]] = field(default_factory=list)
    # Set by the drain step: the low marks of the room partitions this unit owns.
    room_offsets: list[TopicPartition] = field(default_factory=list)
    # Set by the unit when tracing is on: when it was polled (time.time_ns(); its spans' start).
    polled_ns: int = 0

    def track(self, m: Message) -> TP:
        """Note the message's position (first and last offset per partition)."""
        tp = (m.topic(), m.partition())
        if tp not in self.first:
            self.first[tp] = m.offset()
        self.last[tp] = m.offset()
        return tp

    def resume_offsets(self) -> list[TopicPartition]:
        """Where each source partition resumes once the batch commits: after its last
        message, or at its held message (a partition held at its first message has
        nothing to commit)."""
        out = list(self.room_offsets)
        held_at = self.held_at
        for tp, last in self.last.items():
            nxt = held_at.get(tp, last + 1)
            if nxt > self.first[tp]:
                out.append(TopicPartition(tp[0], tp[1], nxt))
        return out

    def forwards(self, item: Item) -> bool:
        """False if the item is held, or behind a held message of its partition."""
        if not self.held_at:
            return True
        m = item.m
        held = self.held_at.get((m.topic(), m.partition()))
        return held is None or m.offset() < held
