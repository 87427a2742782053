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

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from router.config.settings import RoutingSettings
from router.errors import InvalidRequest, RouterError

GUARANTEE_ID = "guarantee-id"
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

_TRUE = frozenset({b"true", b"1", b"True", b"TRUE"})
_FALSE = frozenset({b"false", b"0", b"False", b"FALSE"})

Headers = Sequence[tuple[str, bytes | None]]
T = TypeVar("T")


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


@dataclass(frozen=True, slots=True)
class Routing:
    """What the router needs to know about one message."""

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


def _int(name: str, raw: bytes) -> int:
    try:
        text = raw.decode("ascii")
        if not text.isdigit():
            raise ValueError
        return int(text)
    except (UnicodeDecodeError, ValueError):
        raise BadInput(f"bad-{name}", f"header {name!r} is not a non-negative integer") from None


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


@functools.lru_cache(maxsize=64)
def _ordinary(ttl_ms: int) -> Routing:
    return Routing(None, False, ttl_ms)  # frozen: one instance serves every message


def parse(headers: Headers | None, rules: RoutingSettings) -> Routing:
    """Read the routing headers of one message; raise BadInput with the reason if malformed."""
    if not headers:
        return _ordinary(rules.default_ttl_ms)
    seen: dict[str, bytes | None] = {}
    for key, value in headers:
        if key in ROUTING_HEADERS:
            if key in seen:
                raise BadInput("duplicate-header", f"header {key!r} appears more than once")
            seen[key] = value
    if not seen:
        return _ordinary(rules.default_ttl_ms)
    gid = _guarantee_id(seen.get(GUARANTEE_ID), rules)
    try:
        return _parse_rest(seen, gid, rules)
    except BadInput as error:
        # The group is known: say which, so that its poison policy can apply.
        error.guarantee_id = gid
        error.final = gid is not None and seen.get(FINAL) in _TRUE
        error.seq = _lenient(partial(_int, "seq", seen.get(SEQ) or b""), SEQ in seen)
        raw_type = seen.get(MESSAGE_TYPE)
        error.message_type = _lenient(partial(raw_type.decode), True) if raw_type else None
        raw = seen.get(ON_POISON)
        policy = raw.decode("utf-8", "replace") if raw else None
        error.on_poison = policy if policy in POISON_POLICIES else None
        if gid is not None:  # a bad first message keeps its group's delivery
            raw = seen.get(DELIVERY)
            error.complete = (
                raw == b"complete" if raw else _complete_by_rules(error.message_type, rules)
            )
            raw = seen.get(ORDER)
            logical = raw == b"logical" if raw else rules.default_order == "logical"
            error.logical = logical  # with an unreadable seq: dead-lettered in the room
        raise


def _lenient(read: Callable[[], T], present: bool) -> T | None:
    if not present:
        return None
    try:
        value = read()
    except (BadInput, UnicodeDecodeError):
        return None
    return None if value == "" else value  # a seq of 0 is a number


def _guarantee_id(raw: bytes | None, rules: RoutingSettings) -> str | None:
    if not raw:
        return None
    if len(raw) > rules.max_guarantee_id_bytes:
        raise BadInput(
            "bad-guarantee-id",
            f"guarantee ID is {len(raw)} bytes, more than {rules.max_guarantee_id_bytes}",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("bad-guarantee-id", "guarantee ID is not valid UTF-8") from None


def _parse_rest(seen: dict[str, bytes | None], gid: str | None, rules: RoutingSettings) -> Routing:
    final = False
    if FINAL in seen:
        raw = seen[FINAL] or b""
        if raw in _TRUE:
            final = True
        elif raw not in _FALSE:
            raise BadInput("bad-final-flag", f"final flag {raw[:32]!r} is not true/false")
    if final and gid is None:
        raise BadInput("final-without-guarantee-id", "final flag set on a message with no group")

    message_type: str | None = None
    ttl = rules.default_ttl_ms
    raw_type = seen.get(MESSAGE_TYPE)
    if raw_type:
        try:
            message_type = raw_type.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput("unknown-message-type", "message type is not valid UTF-8") from None
        known = rules.ttl_by_type.get(message_type)
        if known is None:
            raise BadInput("unknown-message-type", f"message type {message_type[:64]!r} is unknown")
        ttl = known

    raw_ttl = seen.get(TTL_MS)
    if raw_ttl:
        ttl = _int("ttl", raw_ttl)
        if not rules.min_ttl_ms <= ttl <= rules.max_ttl_ms:
            raise BadInput(
                "bad-ttl", f"TTL {ttl} ms outside [{rules.min_ttl_ms}, {rules.max_ttl_ms}]"
            )

    seq: int | None = None
    raw_seq = seen.get(SEQ)
    if raw_seq:
        seq = _int("seq", raw_seq)

    on_poison: str | None = None
    raw_policy = seen.get(ON_POISON)
    if raw_policy:
        on_poison = raw_policy.decode("utf-8", "replace")
        if on_poison not in POISON_POLICIES:
            raise BadInput(
                "bad-poison-policy",
                f"{ON_POISON} {on_poison[:32]!r} is not one of {POISON_POLICIES}",
            )

    complete = False
    raw_delivery = seen.get(DELIVERY)
    if raw_delivery:
        delivery = raw_delivery.decode("utf-8", "replace")
        if delivery not in DELIVERIES:
            raise BadInput(
                "bad-delivery", f"{DELIVERY} {delivery[:32]!r} is not one of {DELIVERIES}"
            )
        complete = delivery == "complete"
    elif gid is not None:
        complete = _complete_by_rules(message_type, rules)

    logical = rules.default_order == "logical" and seq is not None
    raw_order = seen.get(ORDER)
    if raw_order:
        order = raw_order.decode("utf-8", "replace")
        if order not in ORDERS:
            raise BadInput("bad-order", f"{ORDER} {order[:32]!r} is not one of {ORDERS}")
        if order == "logical" and seq is None and gid is not None:
            raise BadInput("bad-seq", f"{ORDER} logical needs a {SEQ} header on every member")
        logical = order == "logical"
    grouped = gid is not None
    return Routing(
        gid, final, ttl, seq, message_type, on_poison, complete and grouped, logical and grouped
    )


def _complete_by_rules(message_type: str | None, rules: RoutingSettings) -> bool:
    by_type = rules.delivery_by_type.get(message_type or "")
    return (by_type or rules.default_delivery) == "complete"


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
