"""Reading a message's routing headers (`parse`, re-exported as `router.contract.parse`):
what the router needs to route it (`Routing`), or why it cannot (`BadInput`, the
dead-letter reason). The headers and what they mean: `router.contract.headers`.
Pure: no I/O."""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from router.config.settings import RoutingSettings
from router.contract.headers import (
    DELIVERIES,
    DELIVERY,
    FINAL,
    GUARANTEE_ID,
    MESSAGE_TYPE,
    ON_POISON,
    ORDER,
    ORDERS,
    POISON_POLICIES,
    RESERVED_WHY,
    ROUTING_HEADERS,
    SEQ,
    TTL_MS,
    BadInput,
    Headers,
    Routing,
)

T = TypeVar("T")
_TRUE = frozenset({b"true", b"1", b"True", b"TRUE"})
_FALSE = frozenset({b"false", b"0", b"False", b"FALSE"})


def _int(name: str, raw: bytes) -> int:
    try:
        text = raw.decode("ascii")
        if not text.isdigit():
            raise ValueError
        return int(text)
    except (UnicodeDecodeError, ValueError):
        raise BadInput(f"bad-{name}", f"header {name!r} is not a non-negative integer") from None


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
    if raw.startswith(b"~"):  # RESERVED_PREFIX
        raise BadInput("bad-guarantee-id", RESERVED_WHY)
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
