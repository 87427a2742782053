"""The verdict's records (pure): what the senders sent (`Sent`, as Kafka acknowledged it)
and what a destination holds (`Seen`, identified by its payload), and how the copies of
one message are told apart: each event's first copy (`first_copies`), a multicast copy's
name (`copy_id`). Every other module of the verdict reads these; this one reads none of
them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sent:
    event_id: str
    group: str | None
    seq: int
    final: bool
    queues: tuple[str, ...] | None = None  # multicast: expected once on each of these
    expires: bool = False  # sent with a lifetime: delivered or expired, either is right
    priority: int | None = None  # its `message-priority` header (None: it had none)
    created_ms: int | None = None  # its create time (payload `created_at`), if recorded
    # Whole-group delivery asked for (`guarantee-delivery: complete`, its group's);
    # logical order (`guarantee-order: logical`), and where it was in its sender's order
    whole: bool = False
    logical: bool = False
    position: int | None = None


@dataclass(frozen=True, slots=True)
class Seen:
    queue: str  # the destination: a receive queue, or "transfer[<partition>]" (send side)
    offset: int
    event_id: str
    group: str | None
    seq: int
    final: bool
    latency_ms: float | None = None
    append_ms: int | None = None  # the broker's append time on `queue` (LogAppendTime)
    created_ms: int | None = None  # the sender's create time (payload `created_at`)
    band: int = 0  # the band topic of `queue` it is on (router.priority: 0 = the queue)


def deliveries(sent: Iterable[Sent]) -> int:
    """Records the receive queues should hold if nothing expired: one per message, one
    per target queue for a multicast one."""
    return sum(len(s.queues) if s.queues is not None else 1 for s in sent)


def first_copies(records: Iterable[Seen]) -> tuple[list[Seen], int]:
    """(each event's first copy, the number of extra copies): the first is the earliest
    appended if append times are known, else the lowest (destination, offset)."""
    best: dict[str, Seen] = {}
    extra = 0
    for r in records:
        old = best.get(r.event_id)
        if old is not None:
            extra += 1
        if old is None or _copy_key(r) < _copy_key(old):
            best[r.event_id] = r
    return list(best.values()), extra


def _copy_key(r: Seen) -> tuple[int, str, int]:
    return (r.append_ms if r.append_ms is not None else 0, r.queue, r.offset)


def copy_id(event_id: str, queue: str) -> str:
    """A multicast message's copy on one queue, as the verdict names it."""
    return f"{event_id}@{queue}"
