"""What the receiver library hands the application, and its bookkeeping (pure).

`Received` is one message with its routing headers read; `ReceivedGroup` a group's
messages (or one ordinary message). `OffsetTracker` knows, per partition, the offset the
receiver may commit: never past a message received and not yet done. `Gatherer` puts
groups together for `Receiver.receive_group`.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from router import contract
from router.contract.headers import routing_of

log = logging.getLogger("router.receiver")

TP = tuple[str, int]
Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Received:
    """One message of a receive queue, with its routing headers read: `guarantee_id`
    (None: an ordinary message), `final`, and `seq` (its number in the group, if sent).
    A message reassembled from segments (`router.receiver.reassembly`) has the first segment's
    offset, headers and `seq`, the last one's `final`, and every segment's offset in
    `parts` (empty for a message of one record)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int | None
    guarantee_id: str | None
    final: bool
    seq: int | None
    parts: tuple[int, ...] = ()

    @property
    def grouped(self) -> bool:
        """Whether the message belongs to a group."""
        return self.guarantee_id is not None


@dataclass(frozen=True, slots=True)
class ReceivedGroup:
    """A group's messages in order (one ordinary message: `guarantee_id` None). `complete`:
    its final is among them and no member is missing; an incomplete one was returned after
    `incomplete_after` seconds without a new member (its final never came: see
    docs/explanation/routing.md), or misses members the receiver found expired (`expired_seqs`:
    their `guarantee-seq`; an expired final, or one under `expire-group`, ends it at once), or
    numbers that never reached it (`missing_seqs`: a numbered group's `guarantee-seq`s below its
    final that none of its members has: dead-lettered or expired upstream)."""

    guarantee_id: str | None
    messages: tuple[Received, ...]
    complete: bool
    expired_seqs: tuple[int, ...] = ()
    missing_seqs: tuple[int, ...] = ()

    @property
    def values(self) -> list[bytes | None]:
        """The members' payloads, in order."""
        return [m.value for m in self.messages]


class OffsetTracker:
    """Per partition, the offsets received and not yet done (pure). The offset to commit
    is the lowest of them, or one past the highest received: never past a message the
    application has not finished, whatever order it finishes them in. A message may be
    given as a `token` (its object): `done` then counts only for that delivery of it, not
    for an earlier one that `rewind` made void."""

    def __init__(self) -> None:
        self._open: dict[TP, dict[int, object]] = {}  # ascending (insertion) -> token
        self._next: dict[TP, int] = {}

    def received(self, tp: TP, offset: int, token: object = None) -> None:
        """A message was handed to the application."""
        self._open.setdefault(tp, {})[offset] = token
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def done(self, tp: TP, offset: int, token: object = None) -> int | None:
        """Mark one offset done; the partition's commit offset if it moved, else None."""
        pending = self._open.get(tp)
        if pending is None or offset not in pending:
            return None
        held = pending[offset]
        if token is not None and held is not None and held is not token:
            return None  # an earlier delivery of the message, made void by a rewind
        was_lowest = next(iter(pending)) == offset
        del pending[offset]
        if not was_lowest:
            return None
        return next(iter(pending)) if pending else self._next[tp]

    def is_open(self, tp: TP, offset: int, token: object = None) -> bool:
        """Whether the message (this delivery of it, with `token`) is received, not done."""
        pending = self._open.get(tp)
        if pending is None or offset not in pending:
            return False
        held = pending[offset]
        return token is None or held is None or held is token

    def open_below(self, tp: TP, offset: int) -> list[int]:
        """The offsets received and not done below `offset` on the partition."""
        return [o for o in self._open.get(tp, {}) if o < offset]

    def knows(self, tp: TP) -> bool:
        """Whether anything was received from the partition since it was assigned."""
        return tp in self._next

    def rewind(self, tp: TP, offset: int) -> None:
        """The partition is read again from `offset`: what was received from there on is
        void (it comes again); the commit offset stays at or below `offset`."""
        pending = self._open.get(tp, {})
        for o in [o for o in pending if o >= offset]:
            del pending[o]
        if tp in self._next:
            self._next[tp] = min(self._next[tp], offset)

    def forget(self, tp: TP) -> None:
        """The partition was revoked: another receiver takes it from the commit offset."""
        self._open.pop(tp, None)
        self._next.pop(tp, None)


def from_message(m: Any) -> Received:
    """A consumed confluent-kafka message, its routing headers read (unreadable headers
    are logged and dropped: the message is still delivered)."""
    try:
        headers = contract.read_headers(m) or []
    except contract.BadInput as bad:
        log.warning("%s[%d]@%d: %s; delivered without headers", *_where(m), bad)
        headers = []
    gid, final, seq = routing_of(headers)
    ts_type, ts = m.timestamp()
    topic, partition, offset = _where(m)
    timestamp = ts if ts_type else None
    return Received(
        topic, partition, offset, m.key(), m.value(), headers, timestamp, gid, final, seq
    )


def usable(m: Any) -> bool:
    """Whether a consumed record is a message (not an error or a partition's end); a
    fatal error is raised, others are logged."""
    err = m.error()
    if err is None:
        return True
    if err.fatal():
        raise KafkaException(err)
    if err.code() != KafkaError._PARTITION_EOF:
        log.warning("consumer error: %s", err)
    return False


def _where(m: Any) -> tuple[str, int, int]:
    return str(m.topic()), int(m.partition()), int(m.offset())


class Gatherer:
    """Groups put together from their members as they are received (pure; the clock is
    passed in). Members are kept per (queue, partition, group) until the final."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, int, str], tuple[list[Received], float]] = {}
        self._ready: deque[ReceivedGroup] = deque()
        self._gaps: dict[tuple[str, int, str], list[int | None]] = {}  # members expired
        self._used = False  # fed by receive_group: until then, no gap is kept

    def next_ready(self, now: float, incomplete_after: float) -> ReceivedGroup | None:
        """The oldest whole group, else a group with no new member for `incomplete_after`
        seconds (returned with `complete=False`), else None."""
        self._used = True
        if self._ready:
            return self._ready.popleft()
        for key, (members, last) in list(self._open.items()):
            if now - last >= incomplete_after:
                del self._open[key]
                log.warning(
                    "group %r incomplete after %.0f s: returned as it is", key[2], now - last
                )
                gaps = _seqs(self._gaps.pop(key, []))
                return ReceivedGroup(key[2], tuple(members), False, gaps)
        return None

    def add(self, m: Received, now: float) -> ReceivedGroup | None:
        """Take one received message: an ordinary one comes back at once, as a group of
        its own; a member is kept (its group is ready once its final comes)."""
        self._used = True
        if m.guarantee_id is None:
            return ReceivedGroup(None, (m,), True)
        key = (m.topic, m.partition, m.guarantee_id)
        members, _ = self._open.get(key, ([], now))
        members.append(m)
        if m.final:
            self._open.pop(key, None)
            gaps = _seqs(self._gaps.pop(key, []))
            missing = _missing(members, gaps)
            # a tail whose head was returned incomplete is not a whole group either
            whole = members[0].seq in (None, 0) and not gaps and not missing
            self._ready.append(ReceivedGroup(m.guarantee_id, tuple(members), whole, gaps, missing))
        else:
            self._open[key] = (members, now)
        return None

    def expired(self, m: Received, ends_group: bool) -> None:
        """Member `m` was found expired (never handed out): its group misses it; if it
        ends the group (its final, or `expire-group`), what was gathered is ready now."""
        if m.guarantee_id is None or not self._used:
            return
        key = (m.topic, m.partition, m.guarantee_id)
        gaps = self._gaps.setdefault(key, [])
        gaps.append(m.seq)
        if not ends_group:
            return
        del self._gaps[key]
        members, _ = self._open.pop(key, ([], 0.0))
        if members:
            self._ready.append(ReceivedGroup(m.guarantee_id, tuple(members), False, _seqs(gaps)))

    def forget(self, tp: TP) -> None:
        """The partition was revoked: drop what was gathered from it (another receiver
        reads it again from the commit offset)."""
        for k in [k for k in self._open if k[:2] == tp]:
            del self._open[k]
        for k in [k for k in self._gaps if k[:2] == tp]:
            del self._gaps[k]
        kept = [g for g in self._ready if (g.messages[0].topic, g.messages[0].partition) != tp]
        self._ready = deque(kept)

    def rewind(self, tp: TP, offset: int, now: float) -> None:
        """The partition is read again from `offset`: members gathered from there on are
        dropped (they come again); a group kept only with its members before `offset`."""
        for key in [k for k in self._open if k[:2] == tp]:
            members, last = self._open[key]
            kept = [m for m in members if m.offset < offset]
            if kept:
                self._open[key] = (kept, last)
            else:
                del self._open[key]
        ready: deque[ReceivedGroup] = deque()
        for g in self._ready:
            first = g.messages[0]
            if (first.topic, first.partition) != tp or g.messages[-1].offset < offset:
                ready.append(g)
                continue
            kept = [m for m in g.messages if m.offset < offset]
            if kept and g.guarantee_id is not None:
                self._open[(*tp, g.guarantee_id)] = (kept, now)
        self._ready = ready


def _seqs(gaps: list[int | None]) -> tuple[int, ...]:
    return tuple(s for s in gaps if s is not None)


def _missing(members: list[Received], expired: tuple[int, ...]) -> tuple[int, ...]:
    """The numbers below a numbered group's last that no member has (a reassembled one
    has one per segment) nor an expired member; () if a member has no number."""
    have = set(expired)
    for m in members:
        if m.seq is None:
            return ()
        have.update(range(m.seq, m.seq + max(len(m.parts), 1)))
    return tuple(sorted(set(range(max(have) + 1)) - have)) if have else ()


def offsets_of(m: Received) -> tuple[int, ...]:
    """The records a message was read from (a reassembled one: every segment's)."""
    return getattr(m, "parts", ()) or (m.offset,)


def token_of(m: Received) -> Received | None:
    """What `OffsetTracker` knows this delivery by (a reassembled message: its records)."""
    return None if getattr(m, "parts", ()) else m
