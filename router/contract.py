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

The router adds `router-origin` (`topic/partition/offset` of the send queue record) when
it forwards, and keeps every other header, the key, the value and the timestamp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from router.config import RoutingSettings

GUARANTEE_ID = "guarantee-id"
FINAL = "guarantee-final"
SEQ = "guarantee-seq"
MESSAGE_TYPE = "message-type"
TTL_MS = "guarantee-ttl-ms"
ORIGIN = "router-origin"

ROUTING_HEADERS = frozenset({GUARANTEE_ID, FINAL, SEQ, MESSAGE_TYPE, TTL_MS})

_TRUE = frozenset({b"true", b"1", b"True", b"TRUE"})
_FALSE = frozenset({b"false", b"0", b"False", b"FALSE"})

Headers = Sequence[tuple[str, bytes | None]]


class BadInput(Exception):
    """A message the router cannot route; it is dead-lettered with this reason."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Routing:
    """What the router needs to know about one message."""

    guarantee_id: str | None
    final: bool
    ttl_ms: int
    seq: int | None = None
    message_type: str | None = None

    @property
    def grouped(self) -> bool:
        return self.guarantee_id is not None


def _int(name: str, raw: bytes) -> int:
    try:
        text = raw.decode("ascii")
        if not text.isdigit():
            raise ValueError
        return int(text)
    except (UnicodeDecodeError, ValueError):
        raise BadInput(f"bad-{name}", f"header {name!r} is not a non-negative integer") from None


def parse(headers: Headers | None, rules: RoutingSettings) -> Routing:
    """Read the routing headers of one message; raise BadInput with the reason if malformed."""
    if not headers:
        return Routing(None, False, rules.default_ttl_ms)
    seen: dict[str, bytes | None] = {}
    for key, value in headers:
        if key in ROUTING_HEADERS:
            if key in seen:
                raise BadInput("duplicate-header", f"header {key!r} appears more than once")
            seen[key] = value
    if not seen:
        return Routing(None, False, rules.default_ttl_ms)

    gid: str | None = None
    raw_gid = seen.get(GUARANTEE_ID)
    if raw_gid:
        if len(raw_gid) > rules.max_guarantee_id_bytes:
            raise BadInput(
                "bad-guarantee-id",
                f"guarantee ID is {len(raw_gid)} bytes, more than {rules.max_guarantee_id_bytes}",
            )
        try:
            gid = raw_gid.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput("bad-guarantee-id", "guarantee ID is not valid UTF-8") from None

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

    return Routing(gid, final, ttl, seq, message_type)


def headers_for(
    guarantee_id: str | None,
    *,
    final: bool = False,
    seq: int | None = None,
    message_type: str | None = None,
    ttl_ms: int | None = None,
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
    elif final:
        raise ValueError("an ordinary message (no guarantee ID) cannot be final")
    if message_type is not None:
        out.append((MESSAGE_TYPE, message_type.encode("utf-8")))
    return out
