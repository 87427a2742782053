"""Expired messages as events (pure): what a hop writes instead of forwarding a message
whose lifetime ended (`router.contract.lifetime`). Called by the emitter wherever it would have
dead-lettered the message, so every path that accounts for a bad message (its own batch,
its parked place in the waiting room, a drain) accounts for an expired one the same way,
on the events topic instead of the dead-letter topic."""

from __future__ import annotations

import logging

from router.contract import events, lifetime, schemas
from router.contract.headers import BadInput
from router.unit.steps.batch import Item, where
from router.unit.steps.emit.records import Emitting

Headers = list[tuple[str, bytes | None]]

log = logging.getLogger("router.emit")


def expired_event(
    emitter: Emitting,
    item: Item,
    bad: BadInput,
    now_ms: int,
    source: tuple[str, int, int] | None = None,
) -> tuple[bytes | None, bytes, Headers]:
    """The key, value and headers of `item`'s ExpiredMessage event (its source position:
    `source` if given, else the record's own)."""
    m = item.m
    ts_type, ts = m.timestamp()
    topic, partition, offset = source or (m.topic(), m.partition(), m.offset())
    expires_ms = bad.expires_ms if bad.expires_ms is not None else instant(item.headers)
    record = events.expired_message(
        bad,
        hop=emitter.spec.side,
        topology=emitter.topology,
        unit=emitter.unit,
        topic=topic,
        partition=partition,
        offset=offset,
        timestamp_ms=ts if ts_type else None,
        expires_ms=expires_ms,
        on_expiry=_on_expiry(emitter, item, bad) if bad.guarantee_id is not None else None,
        key=m.key(),
        value=m.value(),
        headers=item.headers,
        now_ms=now_ms,
    )
    log.warning("expired %s: %s", where(m), bad.detail)
    headers: Headers = [(schemas.SCHEMA_HEADER, events.EXPIRED_MESSAGE.encode())]
    key = bad.guarantee_id.encode() if bad.guarantee_id else m.key()
    return key, record, headers


def _on_expiry(emitter: Emitting, item: Item, bad: BadInput) -> str:
    """The group's outcome; for a member read back from the room (whose reason there keeps
    no outcome), its own `message-on-expiry`, else the default."""
    if bad.on_expiry is not None:
        return bad.on_expiry
    for k, v in item.headers or ():
        if k == lifetime.ON_EXPIRY and v:
            return v.decode("utf-8", "replace")
    return emitter.on_expiry


def instant(headers: Headers | None) -> int | None:
    """The expiry the send unit wrote on a record (a parked one keeps it), if readable."""
    for k, v in headers or ():
        if k == lifetime.ROUTER_EXPIRES_AT and v and v.isdigit() and len(v) <= lifetime.MAX_DIGITS:
            return int(v)
    return None
