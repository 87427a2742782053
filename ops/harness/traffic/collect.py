"""Read what the destinations hold at the end of a run (read_committed) and turn it into
the verdict's records (`Seen`, `ExpiredSeen`, `LetterSeen`).

* `read_sides`: the final read, once every unit process stopped or was killed: every
  destination of both sides (send side: each partition of the transfer topic, named
  "transfer[<partition>]"; receive side: every receive queue), every band topic of each
  with priority bands (`Seen.band`), from its beginning to its end, each record with its
  broker append time. "Nothing more arrives" is shown, not
  waited for: the read starts once the transaction timeout (plus the broker's abort check
  interval) has passed since the last unit stopped, so every transaction a unit could
  have left open has been aborted, and it ends only when a read_committed consumer stands
  at every partition's high watermark (which it cannot pass while a transaction is open)
  and the watermarks stay put (`ops.harness.traffic.final_read`).
* `verdict`: `verify` over both sides' final reads.
* `read_accounts`: the events and dead-letter topics, read the same way: ExpiredMessage
  events and dead letters of the workload (`ops.harness.verdict.accounts`).

The background reader while a run goes on (progress, latency, knowing when everything
arrived; never the source of a verdict) is `ops.harness.traffic.progress.Collector`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message, TopicPartition

from ops.harness.traffic.final_read import read_to_end, wait_out_transactions
from ops.harness.traffic.workload import ORDER_EVENT
from ops.harness.verdict.accounts import EVENT_ID_HEADER, ExpiredSeen, LetterSeen
from ops.harness.verdict.bands import lane_name
from ops.harness.verdict.capacity import RELEASE_SLACK_MS, Disturbance
from ops.harness.verdict.records import Seen, Sent
from ops.harness.verdict.sides import CapacitySpec
from ops.harness.verdict.verify import Report, verify
from ops.harness.verdict.visibility import Visibility
from router import contract
from router.config import RouterSettings
from router.contract import events, schemas
from router.contract.priority import band_topic


def to_seen(
    queue: str, offset: int, payload: bytes | None, append_ms: int | None = None
) -> Seen | None:
    """A record of the demo workload, identified by its payload alone."""
    if payload is None:
        return None
    try:
        event = schemas.decode(ORDER_EVENT, payload)
    except Exception:
        return None
    created_ms = round(event["created_at"].timestamp() * 1000)
    return Seen(
        queue,
        offset,
        event["event_id"],
        event["order_id"],
        event["line_no"],
        event["last_line"],
        time.time() * 1000 - created_ms,
        append_ms,
        created_ms,
    )


@dataclass
class SideRead:
    """What one side's destinations hold, read to the end."""

    side: str
    destinations: tuple[str, ...]  # each one all its band topics
    records: list[Seen] = field(default_factory=list)
    undecodable: int = 0
    bands: int = 1  # the topology's priority bands


# A destination's record (destination name, message) -> `Seen` (None: undecodable).
Decode = Callable[[str, Message], Seen | None]


def order_event(dest: str, m: Message) -> Seen | None:
    """A record of the demo workload (`ORDER_EVENT` payloads), with its append time."""
    return to_seen(dest, m.offset(), m.value(), m.timestamp()[1])


def destinations(settings: RouterSettings) -> dict[str, dict[str, tuple[str, int]]]:
    """Each side's destinations, each as (topic, partition): send side, the partitions of
    the transfer topic, named "transfer[<partition>]"; receive side, the receive queues."""
    t = settings.topology
    return {
        "send": {f"transfer[{p}]": (t.transfer_topic, p) for p in range(t.receive_units)},
        "receive": {q: (q, 0) for q in t.receive_queues},
    }


def lanes(settings: RouterSettings) -> dict[str, TopicPartition]:
    """Every destination's partition on each of its band topics, by a name of its own
    (`lane_name`)."""
    return {
        lane_name(d, b): TopicPartition(band_topic(topic, b), p)
        for side in destinations(settings).values()
        for d, (topic, p) in side.items()
        for b in range(settings.priority.bands)
    }


def read_sides(
    settings: RouterSettings,
    stopped_at: float,
    *,
    timeout: float = 120.0,
    decode: Decode = order_event,
) -> tuple[SideRead, SideRead]:
    """The final read of both sides (send, receive), once the transaction timeout passed
    since `stopped_at` (see the module's docstring): every band topic of every destination.
    Every record must carry the broker's append time (`Pipeline.start` sets LogAppendTime
    on these topics, their band topics included)."""
    dests, bands = destinations(settings), settings.priority.bands
    wait_out_transactions(settings.kafka.transaction_timeout_ms, stopped_at)
    messages = read_to_end(settings.kafka, lanes(settings), timeout)
    reads = []
    for side, partitions in dests.items():
        read = SideRead(side, tuple(partitions), bands=bands)
        for name, band in ((d, b) for d in partitions for b in range(bands)):
            for m in messages[lane_name(name, band)]:
                if side == "send" and any(k == contract.CONTROL for k, _ in m.headers() or []):
                    continue  # a close or skip marker: the router's own, not a message
                kind = m.timestamp()[0]
                if kind != TIMESTAMP_LOG_APPEND_TIME:
                    raise ValueError(
                        f"{lane_name(name, band)}@{m.offset()} has timestamp type {kind}, not "
                        "the broker's append time: Pipeline.start sets LogAppendTime before "
                        "anything runs"
                    )
                record = decode(name, m)
                if record is None:
                    read.undecodable += 1
                else:
                    read.records.append(replace(record, band=band) if band else record)
        reads.append(read)
    return reads[0], reads[1]


def verdict(
    sent: Iterable[Sent],
    send: SideRead,
    receive: SideRead,
    release_slack_ms: int = RELEASE_SLACK_MS,
    disturbances: Sequence[Disturbance] = (),
    accounts: tuple[list[ExpiredSeen], list[LetterSeen]] | None = None,
    visibility: Visibility | None = None,
) -> Report:
    """`verify` over both sides' final reads, interleavings judged by the capacity rule
    (`disturbances`: what the driver did that may have held releases up; `visibility`:
    when records became visible, if the run sampled it: `.visibility.LsoSampler`); with
    `accounts` (`read_accounts`), every message delivered, expired or dead-lettered."""
    capacity = CapacitySpec(
        send.destinations,
        receive.destinations,
        release_slack_ms,
        tuple(disturbances),
        visibility,
    )
    expired, dead = accounts if accounts is not None else (None, None)
    return verify(
        sent,
        receive.records,
        forwarded=send.records,
        capacity=capacity,
        expired=expired,
        dead=dead,
        bands=max(send.bands, receive.bands),
    )


def expired_id(headers: Sequence[tuple[str, bytes | None]], value: bytes | None) -> str | None:
    """The workload's event ID of an ExpiredMessage event record (None: another event,
    or an expired message without the header)."""
    if dict(headers).get(schemas.SCHEMA_HEADER) != events.EXPIRED_MESSAGE.encode():
        return None
    return expired_seen(schemas.decode(events.EXPIRED_MESSAGE, value or b"")).event_id


def expired_seen(e: dict[str, Any]) -> ExpiredSeen:
    """A decoded ExpiredMessage event, as `ops.harness.verdict.accounts` judges it."""
    raw = next((h["value"] for h in e["headers"] if h["key"] == EVENT_ID_HEADER), None)
    expires: datetime | None = e["expires_at"]  # timestamp-millis: fastavro's datetimes
    expired: datetime = e["expired_at"]
    return ExpiredSeen(
        raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None,
        str(e["hop"]),
        f"{e['source_topic']}[{e['source_partition']}]@{e['source_offset']}",
        None if expires is None else round(expires.timestamp() * 1000),
        round(expired.timestamp() * 1000),
    )


def read_accounts(
    settings: RouterSettings, timeout: float = 120.0
) -> tuple[list[ExpiredSeen], list[LetterSeen]]:
    """The ExpiredMessage events and the dead letters (each named by its payload's event
    ID), read to the end with read_committed: call it after `read_sides` (which waited
    for the transactions left open to end)."""
    t = settings.topology
    parts = {
        "events": TopicPartition(t.events_topic, 0),
        "dlq": TopicPartition(t.dead_letter_topic, 0),
    }
    got = read_to_end(settings.kafka, parts, timeout)
    expired = [
        expired_seen(schemas.decode(events.EXPIRED_MESSAGE, m.value()))
        for m in got["events"]
        if dict(m.headers() or []).get(schemas.SCHEMA_HEADER) == events.EXPIRED_MESSAGE.encode()
    ]
    dead = []
    for m in got["dlq"]:
        letter = schemas.decode(events.DEAD_LETTER, m.value())
        seen = to_seen(t.dead_letter_topic, m.offset(), letter["value"])
        dead.append(LetterSeen(seen.event_id if seen else None, str(letter["reason_code"])))
    return expired, dead
