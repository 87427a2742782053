"""The message contract: routing metadata travels in Kafka headers.

Any Kafka client (kcat, the Java console producer, Spark) can send a grouped message
without this library, and the router never decodes a payload to route it.

| header              | value                                   | absent means            |
|---------------------|-----------------------------------------|-------------------------|
| `guarantee-id`      | UTF-8 group ID, 1..256 bytes            | an ordinary message     |
| `guarantee-final`   | `true`/`false` (or `1`/`0`)             | `false`                 |
| `guarantee-seq`     | decimal sequence number in the group    | no sequence checking    |
| `message-type`      | a type from `routing.ttl_by_type`       | the default TTL         |
| `guarantee-ttl-ms`  | entry deletion time for this group, ms  | the type's TTL          |
| `guarantee-on-poison` | `dead-letter` or `stop-group`         | the type's policy       |
| `guarantee-delivery` | `stream` or `complete`                 | `routing.default_delivery` |
| `guarantee-order`   | `lane` or `logical` (by `guarantee-seq`) | `routing.default_order` |

A large message travels as *segments*, each a member of a group, with `segment-id`,
`segment-index`, `segment-last` and, on the last, `segment-bytes` and `segment-sha256`
(`router/contract/segments.py`, docs/explanation/segments.md).

The router adds `router-origin` (`topic/partition/offset` of the send queue record) when
it forwards, and keeps every other header, the key, the value and the timestamp.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

from router.errors import InvalidRequest, RouterError

GUARANTEE_ID = "guarantee-id"
# A guarantee ID may not start with it: the waiting room names its pseudo-groups so (a lane's
# parked ordinary messages, a queue's waiting multicast copies: `router.table.room`).
RESERVED_PREFIX = "~"
RESERVED_WHY = "guarantee ID starts with '~', which the router reserves for its waiting room"
FINAL = "guarantee-final"
SEQ = "guarantee-seq"
MESSAGE_TYPE = "message-type"
TTL_MS = "guarantee-ttl-ms"
ON_POISON = "guarantee-on-poison"
# "complete": the group is staged in the waiting room until its final, then written whole
# to one destination (docs/explanation/whole-groups.md); "stream" (default): as
# its members arrive.
DELIVERY = "guarantee-delivery"
DELIVERIES = ("stream", "complete")
# "logical": the group's members are delivered in `guarantee-seq` order whatever the send
# queue partition or physical order they arrive in (docs/explanation/logical-order.md);
# "lane" (default): one send-queue partition, physical order.
ORDER = "guarantee-order"
ORDERS = ("lane", "logical")
ORIGIN = "router-origin"
# Segments of one large message (router/contract/segments.py): its ID, each segment's index from 0,
# `true` on the last one, and on the last the whole payload's length and SHA-256 (hex).
# A segment is a group member; a group whose guarantee ID is its segment ID is an
# ordinary message carried as a group of its own.
SEGMENT_ID = "segment-id"
SEGMENT_INDEX = "segment-index"
SEGMENT_LAST = "segment-last"
SEGMENT_BYTES = "segment-bytes"
SEGMENT_SHA256 = "segment-sha256"
SEGMENT_HEADERS = frozenset(
    {SEGMENT_ID, SEGMENT_INDEX, SEGMENT_LAST, SEGMENT_BYTES, SEGMENT_SHA256}
)
# On the transfer topic only: "close" marks a group the send side ended without forwarding
# its final (a dead-lettered final, a stopped group), so that the receive side releases it.
# Reserved: a send-queue message carrying it is dead-lettered (bad-headers).
CONTROL = "router-control"
CLOSE = b"close"
# ... and "skip" a member the send side did not forward while its group goes on
# (router/unit/steps/emit/markers.py): the receive side routes it as that member and forwards
# nothing.
SKIP = b"skip"
# The waiting room (router/table/room.py, router/unit/steps/drain/step.py): a parked record names
# its group (or a lane's ordinary pseudo-group) and its source position; a drain marker says how far
# a group was drained.
ROOM = "router-room"
TOKEN = "router-token"
THROUGH = "router-through"
NEXT_SEQ = "router-next-seq"  # logical order: a drain marker's next sequence number
ORIGIN = "router-origin"  # ... and the group it is for (its entry's origin)
DRAINED = b"drained"
# A bad message of a group in the room is parked too, in its place: `<code>|<final 0/1>|
# <detail>`; the drain dead-letters it with that reason (and a bad final still ends the
# group). Room headers a sender set itself are dropped when a record is parked.
BAD = "router-bad"
ROOM_HEADERS = frozenset({ROOM, TOKEN, THROUGH, BAD, NEXT_SEQ, ORIGIN})

ROUTING_HEADERS = frozenset(
    {GUARANTEE_ID, FINAL, SEQ, MESSAGE_TYPE, TTL_MS, ON_POISON, DELIVERY, ORDER}
)
POISON_POLICIES = ("dead-letter", "stop-group")


Headers = Sequence[tuple[str, bytes | None]]


class BadInput(RouterError):
    """A message the router cannot route; it is dead-lettered with this reason.

    When the message's group is known (its guarantee ID was readable), `guarantee_id`,
    `seq`, `message_type` and `on_poison` say so, and the group's poison policy applies."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.guarantee_id: str | None = None
        self.seq: int | None = None
        self.message_type: str | None = None
        self.on_poison: str | None = None
        self.final: bool = False  # its final flag, if readable: a bad final still ends its group
        self.complete: bool = False  # whole-group delivery asked for, if readable
        self.logical: bool = False  # logical order asked for, if readable (seq or not)
        # an expired message's instant (router.contract.lifetime)
        self.expires_ms: int | None = None
        self.on_expiry: str | None = None  # ... and its group's outcome


class Routing(NamedTuple):
    """What the router needs to know about one message. Immutable (one instance of an
    ordinary message's serves every such message) and a tuple: built for every message
    a unit reads, where a frozen dataclass's construction cost twice as much as the rest
    of reading a grouped message's headers."""

    guarantee_id: str | None
    final: bool
    ttl_ms: int
    seq: int | None = None
    message_type: str | None = None
    on_poison: str | None = None
    complete: bool = False  # whole-group delivery (a grouped message only)
    logical: bool = False  # logical order by `seq` (a grouped message with a seq only)

    @property
    def grouped(self) -> bool:
        return self.guarantee_id is not None

    def bad(self, code: str, detail: str) -> BadInput:
        """A BadInput for this (well-formed) message, e.g. its payload cannot be decoded."""
        error = BadInput(code, detail)
        error.guarantee_id, error.seq = self.guarantee_id, self.seq
        error.message_type, error.on_poison = self.message_type, self.on_poison
        error.final, error.complete, error.logical = self.final, self.complete, self.logical
        return error


_headers = operator.methodcaller("headers")


def read_headers(message: Any) -> list[tuple[str, bytes | None]] | None:
    """A consumed message's headers, or BadInput("bad-headers") if they cannot be read.

    confluent-kafka fails to convert a header *name* that is not UTF-8 and returns a list
    with an exception pending. CPython 3.11 notices that only on the generic call path; a
    hot loop's specialised `m.headers()` call would let it surface later, anywhere. Calling
    through operator.methodcaller keeps the error at this call.
    """
    try:
        headers: list[tuple[str, bytes | None]] | None = _headers(message)
    except SystemError as exc:
        cause = exc.__cause__ or exc
        raise BadInput("bad-headers", f"the headers cannot be read: {cause}"[:300]) from None
    return headers


def headers_for(
    guarantee_id: str | None,
    *,
    final: bool = False,
    seq: int | None = None,
    message_type: str | None = None,
    ttl_ms: int | None = None,
    on_poison: str | None = None,
    delivery: str | None = None,
    order: str | None = None,
) -> list[tuple[str, bytes]]:
    """The routing headers a sender attaches (the inverse of `parse`)."""
    out: list[tuple[str, bytes]] = []
    if guarantee_id is not None:
        if guarantee_id.startswith(RESERVED_PREFIX):
            raise InvalidRequest(f"{RESERVED_WHY}: {guarantee_id[:64]!r}")
        out.append((GUARANTEE_ID, guarantee_id.encode("utf-8")))
        if final:
            out.append((FINAL, b"true"))
        if seq is not None:
            out.append((SEQ, str(seq).encode("ascii")))
        if ttl_ms is not None:
            out.append((TTL_MS, str(ttl_ms).encode("ascii")))
        if on_poison is not None:
            out.append((ON_POISON, on_poison.encode("ascii")))
        if delivery is not None:
            out.append((DELIVERY, delivery.encode("ascii")))
        if order is not None:
            out.append((ORDER, order.encode("ascii")))
    elif final:
        raise InvalidRequest("an ordinary message (no guarantee ID) cannot be final")
    if message_type is not None:
        out.append((MESSAGE_TYPE, message_type.encode("utf-8")))
    return out


def routing_of(headers: Headers) -> tuple[str | None, bool, int | None]:
    """The routing headers (guarantee ID, final, seq), read leniently (the router
    validated them already)."""
    gid: str | None = None
    final = False
    seq: int | None = None
    for k, v in headers:
        if v is None:
            continue
        if k == GUARANTEE_ID:
            gid = v.decode("utf-8", "replace")
        elif k == FINAL:
            final = v in (b"true", b"1", b"True", b"TRUE")
        elif k == SEQ and v.isdigit():
            seq = int(v)
    return gid, final, seq
