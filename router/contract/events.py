"""The router's own events, as Avro records (schemas in `schemas/router/`): schemaless, or,
once `use_registry` registered their schemas (registry.frame_events), registry-framed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from router.backends.registry import framing
from router.backends.registry.client import RegistryClient
from router.contract import schemas
from router.contract.headers import BadInput

ABANDONED_GROUP = "router.events.AbandonedGroup"
DEAD_LETTER = "router.events.DeadLetter"
GROUP_STOPPED = "router.events.GroupStopped"
TABLE_RESET = "router.events.TableReset"
GROUP_WAIT_TIMED_OUT = "router.events.GroupWaitTimedOut"
GROUP_STAGING_ABORTED = "router.events.GroupStagingAborted"
SEQUENCE_GAP = "router.events.SequenceGap"
EXPIRED_MESSAGE = "router.events.ExpiredMessage"
HOPS = {"send": "SEND_UNIT", "receive": "RECEIVE_UNIT", "receiver": "RECEIVER"}

SIDES = {"send": "SEND", "receive": "RECEIVE", "receiver": "RECEIVER"}  # receiver: the library
EVENTS = (
    ABANDONED_GROUP, DEAD_LETTER, GROUP_STOPPED, TABLE_RESET, GROUP_WAIT_TIMED_OUT,
    GROUP_STAGING_ABORTED, SEQUENCE_GAP, EXPIRED_MESSAGE,
)  # fmt: skip

# Event schema name -> its registry ID: set once per process at start (`use_registry`).
_registry_ids: dict[str, int] = {}


def use_registry(client: RegistryClient) -> dict[str, int]:
    """Register every event schema under its full name (record name strategy, subject to
    the registry's compatibility rules) and write events framed with their IDs from now on,
    in this process. RegistryUnavailable if the registry cannot be reached."""
    ids = {}
    for name in EVENTS:  # looked up first: writes are rare, and may collide with other units'
        text = schemas.json_schema(name)
        found = client.lookup(name, text)
        ids[name] = found if found is not None else client.register(name, text)
    frame_with(ids)
    return ids


def frame_with(ids: Mapping[str, int]) -> None:
    """Frame the events named in `ids` with these registry IDs (empty: none framed)."""
    _registry_ids.clear()
    _registry_ids.update(ids)


def _encode(name: str, record: dict[str, Any]) -> bytes:
    body = schemas.encode(name, record)
    schema_id = _registry_ids.get(name)
    return body if schema_id is None else framing.frame(schema_id, body)


def abandoned_group(
    gid: str,
    *,
    side: str,
    topology: str,
    destination: str,
    opened_ms: int,
    updated_ms: int,
    ttl_ms: int,
    swept_ms: int,
    final_routed: bool,
    stopped: bool,
) -> bytes:
    """A group the sweeper removed from a table (`router.sweeper.loop`): where it was, since when,
    and whether its final had been routed or the group had been stopped."""
    return _encode(
        ABANDONED_GROUP,
        {
            "guarantee_id": gid,
            "side": SIDES[side],
            "topology": topology,
            "destination": destination,
            "opened_at": opened_ms,
            "last_update_at": updated_ms,
            "ttl_ms": ttl_ms,
            "swept_at": swept_ms,
            "final_routed": final_routed,
            "stopped": stopped,
        },
    )


def group_stopped(
    gid: str,
    error: BadInput,
    *,
    side: str,
    topology: str,
    unit: str,
    topic: str,
    partition: int,
    offset: int,
    now_ms: int,
) -> bytes:
    return _encode(
        GROUP_STOPPED,
        {
            "guarantee_id": gid,
            "side": SIDES[side],
            "topology": topology,
            "reason_code": error.code,
            "reason": error.detail,
            "source_topic": topic,
            "source_partition": partition,
            "source_offset": offset,
            "unit": unit,
            "stopped_at": now_ms,
        },
    )


def table_reset(
    *, side: str, topology: str, previous: str, epoch: str, unit: str, now_ms: int
) -> bytes:
    return _encode(
        TABLE_RESET,
        {
            "side": SIDES[side],
            "topology": topology,
            "previous_epoch": previous,
            "epoch": epoch,
            "unit": unit,
            "detected_at": now_ms,
        },
    )


def group_wait_timed_out(
    gid: str,
    destination: str | None,
    *,
    side: str,
    topology: str,
    max_wait_ms: int,
    now_ms: int,
    waiting: bool = False,
) -> bytes:
    """`destination`: the one the group was admitted to (shared); None: dead-lettered, or
    still `waiting` (routing.wait_timeout_policy "report": reported once, it keeps its
    place in the room)."""
    outcome = "WAITING" if waiting else "DEAD_LETTERED" if destination is None else "SHARED"
    return _encode(
        GROUP_WAIT_TIMED_OUT,
        {
            "guarantee_id": gid,
            "side": SIDES[side],
            "topology": topology,
            "outcome": outcome,
            "destination": destination,
            "max_wait_ms": max_wait_ms,
            "timed_out_at": now_ms,
        },
    )


def group_staging_aborted(
    gid: str,
    *,
    side: str,
    topology: str,
    unit: str,
    staged: int,
    max_staged: int,
    topic: str,
    partition: int,
    offset: int,
    now_ms: int,
) -> bytes:
    return _encode(
        GROUP_STAGING_ABORTED,
        {
            "guarantee_id": gid,
            "side": SIDES[side],
            "topology": topology,
            "unit": unit,
            "staged_messages": staged,
            "max_staged_messages": max_staged,
            "source_topic": topic,
            "source_partition": partition,
            "source_offset": offset,
            "aborted_at": now_ms,
        },
    )


def sequence_gap(
    gid: str,
    *,
    side: str,
    topology: str,
    unit: str,
    expected: int,
    present: int,
    parked: int,
    waited_ms: int,
    outcome: str,
    now_ms: int,
) -> bytes:
    return _encode(
        SEQUENCE_GAP,
        {
            "guarantee_id": gid,
            "side": SIDES[side],
            "topology": topology,
            "unit": unit,
            "expected_seq": expected,
            "next_present_seq": present,
            "parked_messages": parked,
            "waited_ms": waited_ms,
            "outcome": outcome.upper(),
            "detected_at": now_ms,
        },
    )


def dead_letter(
    error: BadInput,
    *,
    side: str,
    unit: str,
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int | None,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    now_ms: int,
    max_value_bytes: int,
) -> bytes:
    """A dead-letter record: the original message, where it came from, and why."""
    size = len(value) if value is not None else 0
    truncated: int | None = None
    if value is not None and size > max_value_bytes:
        value = value[:max_value_bytes]
        truncated = max_value_bytes
    record: dict[str, Any] = {
        "reason_code": error.code,
        "reason": error.detail,
        "side": SIDES[side],
        "unit": unit,
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": offset,
        "source_timestamp": timestamp_ms,
        "key": key,
        "value": value,
        "value_size": size,
        "value_truncated_to": truncated,
        "headers": [{"key": k, "value": v} for k, v in (headers or [])],
        "dead_lettered_at": now_ms,
    }
    return _encode(DEAD_LETTER, record)


def expired_message(
    error: BadInput,
    *,
    hop: str,
    topology: str,
    unit: str,
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int | None,
    expires_ms: int | None,
    on_expiry: str | None,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    now_ms: int,
) -> bytes:
    """A message not delivered because its lifetime ended (`router.contract.lifetime`); `hop`:
    send, receive (the units) or receiver (the library)."""
    record: dict[str, Any] = {
        "guarantee_id": error.guarantee_id,
        "seq": error.seq,
        "final": error.final,
        "on_expiry": on_expiry.upper().replace("-", "_") if on_expiry else None,
        "hop": HOPS[hop],
        "topology": topology,
        "unit": unit,
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": offset,
        "source_timestamp": timestamp_ms,
        "expires_at": expires_ms,
        "expired_at": now_ms,
        "detail": error.detail,
        "key": key,
        "value_size": len(value) if value is not None else 0,
        "headers": [{"key": k, "value": v} for k, v in (headers or [])],
    }
    return _encode(EXPIRED_MESSAGE, record)
