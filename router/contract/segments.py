"""Segments of a large message (pure): how a payload is split, and the segment headers.

A payload larger than the sender's segment size travels as several records, each a
*segment*: a member of a group (the message's own group, or for an ordinary message a
group of its own whose guarantee ID is the segment ID), so the router keeps the segments
contiguous and in order on one receive queue like any group. The headers
(`router/contract/headers.py`; docs/explanation/segments.md):

| header           | on          | value                                                   |
|------------------|-------------|---------------------------------------------------------|
| `segment-id`     | every one   | the logical message, UTF-8, 1..128 bytes                 |
| `segment-index`  | every one   | 0, 1, 2, ... (decimal, below `MAX_SEGMENTS`)             |
| `segment-last`   | the last    | `true` (`false` or absent on the others)                 |
| `segment-bytes`  | the last    | the whole payload's length (decimal, at most 2^40)       |
| `segment-sha256` | the last    | the whole payload's SHA-256, 64 hex digits               |

The length and checksum go on the last segment so that a sender can stream a payload it
reads as it goes. `read` checks one record's segment headers (the units dead-letter a
malformed one as `bad-segment`); checking a whole set is `router.receiver.reassembly`'s.
"""

from __future__ import annotations

import dataclasses
import string
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from router.contract.headers import (
    SEGMENT_BYTES,
    SEGMENT_HEADERS,
    SEGMENT_ID,
    SEGMENT_INDEX,
    SEGMENT_LAST,
    SEGMENT_SHA256,
)
from router.contract.request import Request
from router.errors import ConfigError, InvalidRequest

__all__ = ["HEADERS", "BadSegment", "Part", "Segment", "plan", "read"]

HEADERS = SEGMENT_HEADERS
DEFAULT_SEGMENT_BYTES = 512 * 1024  # well under the topics' 1 MiB + 64 KiB records
MIN_SEGMENT_BYTES = 1024
# What a record holds beside its segment: key, routing, segment and caller's headers.
HEADER_ROOM = 16 * 1024
MAX_SEGMENTS = 1_000_000
MAX_TOTAL_BYTES = 1 << 40
MAX_ID_BYTES = 128
_TRUE, _FALSE = (b"true", b"1"), (b"false", b"0")
_HEX = frozenset(string.hexdigits.encode())


class BadSegment(InvalidRequest):
    """A record's segment headers are malformed (the reason is the message)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One record's segment headers, read."""

    set_id: str
    index: int
    last: bool
    total: int | None = None  # the last segment's `segment-bytes`
    sha256: str | None = None  # ... and `segment-sha256`, lower case


def new_id() -> str:
    """A fresh segment ID (also the guarantee ID of an ordinary message's own group)."""
    return f"seg-{uuid.uuid4().hex}"


def implicit(guarantee_id: str | None, set_id: str) -> bool:
    """Whether the segments' group exists only to carry them (an ordinary message)."""
    return guarantee_id == set_id


def count(total: int, segment_bytes: int) -> int:
    """How many segments a payload of `total` bytes takes (1: it is not segmented)."""
    return max(1, -(-total // segment_bytes))


def pieces(total: int, segment_bytes: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each segment of a payload of `total` bytes, in order."""
    for start in range(0, max(total, 1), segment_bytes):
        yield start, min(start + segment_bytes, total)


def check_size(segment_bytes: int, record_limit: int) -> None:
    """ConfigError unless segments of `segment_bytes`, with their headers, fit a record
    of `record_limit` bytes (the producer's `message.max.bytes`)."""
    if segment_bytes < MIN_SEGMENT_BYTES:
        raise ConfigError(f"segment_bytes {segment_bytes} is below {MIN_SEGMENT_BYTES}")
    if segment_bytes + HEADER_ROOM > record_limit:
        raise ConfigError(
            f"segment_bytes {segment_bytes} + {HEADER_ROOM} bytes for headers exceeds the "
            f"{record_limit} bytes a record may have (message.max.bytes)"
        )


def segment_bytes_for(max_message_bytes: int) -> int:
    """The default segment size under the router's `kafka.max_message_bytes`."""
    return min(DEFAULT_SEGMENT_BYTES, max_message_bytes - HEADER_ROOM)


@dataclass(frozen=True, slots=True)
class Part:
    """One segment to send: its routing (`request`: its group, final flag and the
    caller's number on the first), its headers beside the routing ones (segment headers,
    then the caller's), and its bytes' place in the payload."""

    request: Request
    headers: list[tuple[str, bytes | str | None]]
    start: int
    end: int


@dataclass(frozen=True)
class Plan:
    """How one payload is sent: `count` segments of message `set_id`; `own`: an
    ordinary message, carried as a group of its own (guarantee ID = `set_id`)."""

    set_id: str
    own: bool
    count: int
    parts: Iterator[Part]


def plan(r: Request, total: int, sha256: str, segment_bytes: int, set_id: str = "") -> Plan:
    """The segments of a `total`-byte payload (SHA-256 `sha256`) sent as message `r`.
    Each is a member of `r`'s group, numbered on from the caller's number if it gave one;
    only the last carries `r`'s final flag. An ordinary message gets a group of its own,
    whose last segment is final."""
    set_id = set_id or new_id()
    own = r.guarantee_id is None
    if own:
        r = dataclasses.replace(r, guarantee_id=set_id, final=True)
    n = count(total, segment_bytes)

    def parts() -> Iterator[Part]:
        for i, (start, end) in enumerate(pieces(total, segment_bytes)):
            last = i == n - 1
            part = dataclasses.replace(r, final=r.final and last, seq=None if i else r.seq)
            headers = [*headers_for(set_id, i, last, total, sha256), *r.others]
            yield Part(part, headers, start, end)

    return Plan(set_id, own, n, parts())


def headers_for(
    set_id: str, index: int, last: bool, total: int | None = None, sha256: str | None = None
) -> list[tuple[str, bytes]]:
    """The segment headers of segment `index` (`total` and `sha256` on the last)."""
    out = [(SEGMENT_ID, set_id.encode()), (SEGMENT_INDEX, str(index).encode())]
    if last:
        if total is None or sha256 is None:
            raise InvalidRequest("the last segment carries the payload's length and SHA-256")
        out += [
            (SEGMENT_LAST, b"true"),
            (SEGMENT_BYTES, str(total).encode()),
            (SEGMENT_SHA256, sha256.encode()),
        ]
    return out


def read(headers: Sequence[tuple[str, bytes | None]] | None) -> Segment | None:
    """The segment headers of one record; None if it has none; BadSegment if malformed."""
    seen: dict[str, bytes] = {}
    for k, v in headers or ():
        if k in SEGMENT_HEADERS:
            if k in seen:
                raise BadSegment(f"header {k!r} appears more than once")
            seen[k] = v or b""
    if not seen:
        return None
    raw_id = seen.get(SEGMENT_ID)
    if raw_id is None:
        raise BadSegment(f"{sorted(seen)[0]!r} without {SEGMENT_ID!r}")
    if not 0 < len(raw_id) <= MAX_ID_BYTES:
        raise BadSegment(f"{SEGMENT_ID} must be 1..{MAX_ID_BYTES} bytes, not {len(raw_id)}")
    try:
        set_id = raw_id.decode("utf-8")
    except UnicodeDecodeError:
        raise BadSegment(f"{SEGMENT_ID} is not valid UTF-8") from None
    index = _number(SEGMENT_INDEX, seen.get(SEGMENT_INDEX), MAX_SEGMENTS - 1)
    if index is None:
        raise BadSegment(f"{SEGMENT_INDEX} is missing")
    flag = seen.get(SEGMENT_LAST, b"false")
    if flag.lower() not in _TRUE + _FALSE:
        raise BadSegment(f"{SEGMENT_LAST} {flag[:16]!r} is not true/false")
    last = flag.lower() in _TRUE
    total = _number(SEGMENT_BYTES, seen.get(SEGMENT_BYTES), MAX_TOTAL_BYTES)
    digest = seen.get(SEGMENT_SHA256)
    if not last:
        extra = [h for h in (SEGMENT_BYTES, SEGMENT_SHA256) if h in seen]
        if extra:
            raise BadSegment(f"{extra[0]} on a segment that is not the last")
        return Segment(set_id, index, False)
    if total is None or digest is None:
        raise BadSegment(f"the last segment needs {SEGMENT_BYTES} and {SEGMENT_SHA256}")
    if len(digest) != 64 or not _HEX.issuperset(digest):
        raise BadSegment(f"{SEGMENT_SHA256} is not 64 hexadecimal digits")
    return Segment(set_id, index, True, total, digest.decode().lower())


def _number(name: str, raw: bytes | None, most: int) -> int | None:
    if raw is None:
        return None
    if not (raw.isdigit() and len(raw) <= len(str(most))) or int(raw) > most:
        raise BadSegment(f"{name} {raw[:24]!r} is not an integer in 0..{most}")
    return int(raw)


def problem(
    headers: Sequence[tuple[str, bytes | None]] | None, guarantee_id: str | None, final: bool
) -> str | None:
    """Why a routed record's segment headers are bad (None: fine, or no segment). A
    segment travels in a group; the group's final flag goes on the last segment of its
    last message; an ordinary message's own group ends with its last segment."""
    try:
        seg = read(headers)
    except BadSegment as bad:
        return str(bad)
    if seg is None:
        return None
    if guarantee_id is None:
        return "a segment travels in a group: it needs a guarantee-id"
    if final and not seg.last:
        return "guarantee-final on a segment that is not its message's last"
    if implicit(guarantee_id, seg.set_id) and seg.last and not final:
        return "the last segment of an ordinary message (guarantee-id = segment-id) is final"
    return None
