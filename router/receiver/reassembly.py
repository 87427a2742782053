"""Reassembly of segmented messages on the receiving side (pure; the clock is passed in).

`Reassembler` takes the records of the receive queues in each partition's order
(`router.receiver.received.Received`) and gives back, in the same order, ordinary records as they
are and, for each set of segments (`router.contract.segments`), either one `Received` with the
whole payload (its length and SHA-256 checked against the last segment's headers) or a
`SegmentError` naming what is wrong. A broken set is never handed over as data.

It streams: each segment's bytes are appended to the set's output buffer (an
`io.BytesIO`, whose `getvalue()` hands its buffer over without a copy) and hashed as they
come, and the segment itself is dropped; a set holds its payload once, plus one segment.

Reasons (`SegmentError.reason`), judged once the set ends (its last segment, or the first
record of its partition that is not one of its segments, or `timeout_s` without a new
segment):

* `segment-missing` — an index never came, or the set ended without its last segment;
* `segment-duplicate` — an index came twice;
* `segment-out-of-order` — every index came, not in order;
* `length-mismatch` / `checksum-mismatch` — the bytes differ from `segment-bytes` /
  `segment-sha256`;
* `too-large` — the set grew past `max_bytes` (its bytes are no longer kept);
* `bad-segment` — a record's segment headers are malformed (it ends its set).
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from router.contract import segments
from router.errors import RouterError
from router.receiver.received import Received

log = logging.getLogger("router.receiver")

TP = tuple[str, int]


class SegmentError(RouterError):
    """A segmented message that cannot be handed over whole: `reason` (a code, see
    `router.receiver.reassembly`), `detail`, its `segment_id`, its group (`guarantee_id`, None for
    an ordinary message) and the records it was read from (`messages`, without their
    values). Mark it done (`Receiver.done(error)`) once handled, so that its records'
    offsets are committed; until then a restarted receiver reads them again."""

    def __init__(
        self,
        reason: str,
        detail: str,
        segment_id: str,
        guarantee_id: str | None,
        messages: tuple[Received, ...],
    ) -> None:
        first = messages[0]
        where = f"{first.topic}[{first.partition}]@{first.offset}"
        super().__init__(f"{reason}: segmented message {segment_id!r} at {where}: {detail}")
        self.reason, self.detail = reason, detail
        self.segment_id, self.guarantee_id = segment_id, guarantee_id
        self.messages = messages

    @property
    def offsets(self) -> list[tuple[str, int, int]]:
        """Where its records are: (queue, partition, offset)."""
        return [(m.topic, m.partition, m.offset) for m in self.messages]


@dataclass
class _Set:
    """The segments of one message received so far on one partition."""

    set_id: str
    first: Received
    last_seen: float
    out: io.BytesIO | None = field(default_factory=io.BytesIO)  # None: not kept
    digest: Any = field(default_factory=hashlib.sha256)
    size: int = 0
    next_index: int = 0
    seen: set[int] = field(default_factory=set)
    parts: list[Received] = field(default_factory=list)  # without values
    problem: tuple[str, str] | None = None  # the first thing found wrong, not by index
    unordered: bool = False
    duplicate: int | None = None


class Reassembler:
    """Segments put back together per partition; everything comes out in arrival order
    (`pop`). `max_bytes` bounds one message's payload; `timeout_s` ends a set that gets
    no segment for that long (`expire`)."""

    def __init__(self, max_bytes: int = 1 << 30, timeout_s: float = 120.0) -> None:
        self.max_bytes, self.timeout_s = max_bytes, timeout_s
        self._open: dict[TP, _Set] = {}
        self._out: deque[Received | SegmentError] = deque()
        self._last: dict[TP, int] = {}  # the offset of each partition's latest record

    def __bool__(self) -> bool:
        return bool(self._out)

    def pop(
        self, *, errors: bool = True, live: Callable[[Received], bool] | None = None
    ) -> Received | None:
        """The next record or reassembled message in order, None if none is ready; raises
        the next SegmentError (with `errors=False`, None while one is next). What `live`
        says is void (its partition was rewound since it was read) is dropped."""
        while self._out and live is not None and not live(_head(self._out[0])):
            self._out.popleft()
        if not self._out:
            return None
        head = self._out[0]
        if isinstance(head, SegmentError):
            if not errors:
                return None
            self._out.popleft()
            log.error("%s", head)
            raise head
        return self._out.popleft()  # type: ignore[return-value]

    def add(self, m: Received, now: float) -> None:
        """Take the next record of its partition. A record at or before the latest one
        means the partition is read again (a rewind): what was gathered from it is void."""
        tp = (m.topic, m.partition)
        latest = self._last.get(tp)
        if latest is not None and m.offset <= latest:
            self.forget(tp)
        self._last[tp] = m.offset
        try:
            seg = segments.read(m.headers)
        except segments.BadSegment as bad:
            self._end(tp, f"interrupted at offset {m.offset} by a malformed segment")
            stub = _stub(m, m.guarantee_id)
            self._out.append(SegmentError("bad-segment", str(bad), "?", m.guarantee_id, (stub,)))
            return
        current = self._open.get(tp)
        if seg is None:
            if current is not None:
                self._end(tp, f"interrupted at offset {m.offset} by a record of no segment")
            self._out.append(m)
            return
        if current is not None and (
            current.set_id != seg.set_id or current.first.guarantee_id != m.guarantee_id
        ):
            self._end(tp, f"interrupted at offset {m.offset} by segment set {seg.set_id!r}")
            current = None
        if current is None:
            current = self._open[tp] = _Set(seg.set_id, replace(m, value=None), now)
        self._take(current, m, seg, now)
        if seg.last:
            del self._open[tp]
            self._out.append(self._finish(current, seg))

    def _take(self, s: _Set, m: Received, seg: segments.Segment, now: float) -> None:
        s.last_seen = now
        s.parts.append(_stub(m, _group(s.first, s.set_id)))
        if seg.index in s.seen:
            s.duplicate = seg.index if s.duplicate is None else s.duplicate
        elif seg.index != s.next_index:
            s.unordered = True
        s.seen.add(seg.index)
        s.next_index = seg.index + 1
        value = m.value or b""
        s.size += len(value)
        if s.out is None or s.unordered or s.duplicate is not None:
            s.out = None  # not handed over: stop keeping the bytes
            return
        if s.size > self.max_bytes:
            s.problem = ("too-large", f"more than {self.max_bytes} bytes (max_bytes)")
            s.out = None
            return
        s.out.write(value)
        s.digest.update(value)

    def _finish(self, s: _Set, last: segments.Segment | None) -> Received | SegmentError:
        """The whole message, or what is wrong with the set (the first reason that
        applies, in the order of the module's list)."""
        missing = [i for i in range(max(s.seen) + 1) if i not in s.seen] if last is not None else []
        if last is None:
            reason = ("segment-missing", "its last segment never came")
        elif missing:
            reason = ("segment-missing", f"segment(s) {_ranges(missing)} of {last.index + 1}")
        elif s.duplicate is not None:
            reason = ("segment-duplicate", f"segment {s.duplicate} came twice")
        elif s.unordered:
            reason = ("segment-out-of-order", f"{len(s.seen)} segments, not in index order")
        elif s.problem is not None:
            reason = s.problem
        elif s.size != last.total:
            reason = ("length-mismatch", f"{s.size} bytes, segment-bytes says {last.total}")
        elif s.digest.hexdigest() != last.sha256:
            reason = ("checksum-mismatch", "the bytes' SHA-256 differs from segment-sha256")
        else:
            assert s.out is not None
            value, s.out = s.out.getvalue(), None  # the buffer itself, no copy
            offsets = tuple(p.offset for p in s.parts)
            head = _stub(s.first, _group(s.first, s.set_id))
            return replace(head, value=value, final=s.parts[-1].final, parts=offsets)
        s.out = None
        gid = _group(s.first, s.set_id)
        return SegmentError(reason[0], reason[1], s.set_id, gid, tuple(s.parts))

    def _end(self, tp: TP, why: str) -> None:
        """The open set of `tp` ends here without its last segment."""
        s = self._open.pop(tp, None)
        if s is not None:
            error = self._finish(s, None)
            assert isinstance(error, SegmentError)
            error.detail = f"{error.detail} ({why})"
            error.args = (f"{error.args[0]} ({why})",)
            self._out.append(error)

    def expire(self, now: float) -> None:
        """End the sets that got no segment for `timeout_s` (call when a poll found
        nothing: their next segment is not already waiting)."""
        for tp, s in list(self._open.items()):
            if now - s.last_seen >= self.timeout_s:
                self._end(tp, f"no segment for {now - s.last_seen:.0f} s")

    def forget(self, tp: TP) -> None:
        """The partition was revoked (or rewound): drop what was gathered from it, ready
        or not (it is read again from the committed offset)."""
        self._open.pop(tp, None)
        self._last.pop(tp, None)
        if any(_tp(x) == tp for x in self._out):
            self._out = deque(x for x in self._out if _tp(x) != tp)


def _group(first: Received, set_id: str) -> str | None:
    """The group the application sees: none for an ordinary message's own group."""
    gid = first.guarantee_id
    return None if gid is None or segments.implicit(gid, set_id) else gid


def _stub(m: Received, gid: str | None) -> Received:
    """`m` without its value (kept for its offset and headers)."""
    seq = m.seq if gid is not None else None
    final = m.final if gid is not None else False
    return replace(m, value=None, guarantee_id=gid, seq=seq, final=final)


def _head(x: Received | SegmentError) -> Received:
    return x.messages[0] if isinstance(x, SegmentError) else x


def _tp(x: Received | SegmentError) -> TP:
    m = _head(x)
    return (m.topic, m.partition)


def is_segment(m: Received) -> bool:
    """Whether a record carries segment headers (it is one part of a message)."""
    return any(k in segments.HEADERS for k, _ in m.headers)


def _ranges(numbers: list[int]) -> str:
    """`[1, 2, 3, 7]` -> `1-3, 7`."""
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out[:10]) + (", ..." if len(out) > 10 else "")
