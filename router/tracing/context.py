"""The W3C trace context of a message (https://www.w3.org/TR/trace-context/), pure: read
from and written into Kafka headers without OpenTelemetry, so that a unit checks whether a
message is traced for the cost of a header scan.

A producer's `traceparent` and `tracestate` travel with the message to the receive queue
unchanged: the units copy every header (router/contract/headers.py) and never rewrite these
two; each hop's span is a child of the producer's (docs/how-to/tracing.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACE_HEADERS = frozenset({TRACEPARENT, TRACESTATE})
SAMPLED = 0x01

_HEX = frozenset(b"0123456789abcdef")

Headers = Sequence[tuple[str, bytes | str | None]]


@dataclass(frozen=True, slots=True)
class Parent:
    """The context a message carries: its trace, the span that sent it, its flags."""

    trace_id: int
    span_id: int
    flags: int
    tracestate: str | None = None

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)


def _hex(raw: bytes) -> int | None:
    if not raw or not _HEX.issuperset(raw):
        return None
    return int(raw, 16)


def parse_traceparent(raw: bytes | str) -> tuple[int, int, int] | None:
    """(trace ID, parent span ID, flags) of a `traceparent` value, or None if it is not
    one: version 00 exactly, a later version with at least its fields (and a dash after
    them if longer); lower-case hex; IDs not all zeros; version ff is invalid."""
    if isinstance(raw, str):
        raw = raw.encode("ascii", "replace")
    raw = raw.strip(b" \t")
    if len(raw) < 55 or raw[2:3] != b"-" or raw[35:36] != b"-" or raw[52:53] != b"-":
        return None
    version = _hex(raw[:2])
    if version is None or version == 0xFF or (version == 0 and len(raw) != 55):
        return None
    if len(raw) > 55 and raw[55:56] != b"-":
        return None
    trace_id, span_id, flags = _hex(raw[3:35]), _hex(raw[36:52]), _hex(raw[53:55])
    if not trace_id or not span_id or flags is None:
        return None
    return trace_id, span_id, flags


def format_traceparent(trace_id: int, span_id: int, flags: int) -> bytes:
    """The version-00 `traceparent` of a span."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags & 0xFF:02x}".encode("ascii")


def parent_of(headers: Headers | None) -> Parent | None:
    """The trace context of a message's headers; None without a valid `traceparent` (a
    `traceparent` given twice is not valid: which one would be meant?)."""
    if not headers:
        return None
    traceparent: bytes | str | None = None
    tracestate: bytes | str | None = None
    seen = 0
    for key, value in headers:
        if key == TRACEPARENT:
            traceparent, seen = value, seen + 1
        elif key == TRACESTATE:
            tracestate = value
    if traceparent is None or seen > 1:
        return None
    ids = parse_traceparent(traceparent)
    if ids is None:
        return None
    if isinstance(tracestate, bytes):
        tracestate = tracestate.decode("utf-8", "replace")
    return Parent(*ids, tracestate or None)


def traced(headers: Headers | None) -> Parent | None:
    """The trace context of a message whose producer sampled its trace, else None: what
    a unit or a receiver records a span for."""
    if not headers:
        return None
    for key, _ in headers:
        if key == TRACEPARENT:
            parent = parent_of(headers)
            return parent if parent is not None and parent.sampled else None
    return None


def with_context(
    headers: Sequence[tuple[str, bytes | str | None]], traceparent: bytes, tracestate: str | None
) -> list[tuple[str, bytes | str | None]]:
    """`headers` with their trace context replaced by the given one."""
    out = [h for h in headers if h[0] not in TRACE_HEADERS]
    out.append((TRACEPARENT, traceparent))
    if tracestate:
        out.append((TRACESTATE, tracestate.encode("utf-8")))
    return out
