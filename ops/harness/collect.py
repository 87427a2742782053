"""Read what the destinations hold (read_committed) and turn it into `Seen` records.

* `Collector`: a background reader of the receive queues while a run goes on (progress,
  latency, and knowing when everything arrived). Never the source of a verdict.
* `read_sides`: the final read, once every unit process stopped or was killed: every
  destination of both sides (send side: each partition of the transfer topic, named
  "transfer[<partition>]"; receive side: every receive queue), every band topic of each
  with priority bands (`Seen.band`), from its beginning to its end, each record with its
  broker append time. "Nothing more arrives" is shown, not
  waited for: the read starts once the transaction timeout (plus the broker's abort check
  interval) has passed since the last unit stopped, so every transaction a unit could
  have left open has been aborted, and it ends only when a read_committed consumer stands
  at every partition's high watermark (which it cannot pass while a transaction is open)
  and the watermarks stay put.
* `read_to_end`: that read for any partitions (the tests use it).
* `read_accounts`: the events and dead-letter topics, read the same way: ExpiredMessage
  events and dead letters of the workload (`ops.harness.accounts`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    IsolationLevel,
    KafkaError,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from ops.harness.accounts import EVENT_ID_HEADER, ExpiredSeen, LetterSeen
from ops.harness.bands import lane_name
from ops.harness.capacity import RELEASE_SLACK_MS, Disturbance
from ops.harness.verify import CapacitySpec, Report, Seen, Sent, verify
from ops.harness.workload import ORDER_EVENT
from router import contract
from router.config import KafkaSettings, RouterSettings
from router.contract import events, schemas
from router.contract.priority import band_topic
from router.receiver import Receiver

log = logging.getLogger("router.collect")

# transaction.abort.timed.out.transaction.cleanup.interval.ms of the broker (ops/stack.sh):
# a timed-out transaction is aborted at the first check after its timeout.
ABORT_CHECK_INTERVAL_MS = 1_000


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


class Collector:
    """A background reader of all receive queues from the beginning, and of the events
    topic (the messages expired on the way: `accounted`).

    Without priority bands it reads through the router's `Receiver`; with bands, with a
    plain read_committed consumer of every band topic: the `Receiver` hands the highest
    band out first and holds a queue's other bands while a group of one is being handed
    out, and from the beginning of a chaos run's queues it handed out a few hundred of
    22,000 records in a minute (all of band 2), so a progress reader waiting for all of
    them would wait for its deadline. The order it hands out is not what is counted here.
    """

    def __init__(self, settings: RouterSettings, group_id: str) -> None:
        self.settings = settings
        self.group_id = group_id
        self.seen: list[Seen] = []
        self.undecodable = 0
        self.expired: set[str] = set()  # event IDs with an ExpiredMessage event
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def accounted(self) -> int:
        """Records received, and messages expired on the way."""
        with self._lock:
            return len(self.seen) + len(self.expired)

    def _run(self) -> None:
        t = self.settings.topology
        if self.settings.priority.bands > 1:
            self._run_plain()
            return
        receiver = Receiver.from_settings(
            self.settings,
            [*t.receive_queues, t.events_topic],
            group_id=self.group_id,
            assign=True,
            check_lifetimes=False,
        )
        try:
            while not self._stop.is_set():
                m = receiver.poll(0.2)
                if m is None:
                    continue
                self._take(m.topic, m.offset, m.headers, m.value)
        finally:
            receiver.close()

    def _run_plain(self) -> None:
        """Every band topic of every receive queue, and the events topic, as appended."""
        t, bands = self.settings.topology, self.settings.priority.bands
        consumer = Consumer(
            {
                **self.settings.kafka.common(),
                "group.id": self.group_id,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        topics = [band_topic(q, b) for q in t.receive_queues for b in range(bands)]
        consumer.assign([TopicPartition(n, 0, OFFSET_BEGINNING) for n in [*topics, t.events_topic]])
        try:
            while not self._stop.is_set():
                for m in consumer.consume(500, 0.2):
                    if m.error() is None:
                        self._take(m.topic(), m.offset(), m.headers() or [], m.value())
        finally:
            consumer.close()

    def _take(
        self,
        topic: str,
        offset: int,
        headers: Sequence[tuple[str, bytes | None]],
        value: bytes | None,
    ) -> None:
        if topic == self.settings.topology.events_topic:
            gone = expired_id(headers, value)
            if gone is not None:
                with self._lock:
                    self.expired.add(gone)
            return
        seen = to_seen(topic, offset, value)
        with self._lock:
            if seen is None:
                self.undecodable += 1
            else:
                self.seen.append(seen)

    def wait_for(self, expected: int, timeout: float) -> bool:
        """Until `expected` records arrived or expired, or `timeout`; True if they did.
        (Whether anything more arrives is for the final read to say.)"""
        deadline = time.monotonic() + timeout
        while self.accounted() < expected and time.monotonic() < deadline:
            self._stop.wait(0.1)
        return self.accounted() >= expected

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def wait_out_transactions(transaction_timeout_ms: int, since: float) -> None:
    """Sleep until every transaction open at `since` (a `time.monotonic()` instant, when
    the last writer stopped or was killed) has timed out and been aborted by the broker."""
    wait = since + (transaction_timeout_ms + ABORT_CHECK_INTERVAL_MS) / 1000 - time.monotonic()
    if wait > 0:
        time.sleep(wait)


class Unresolved(TimeoutError):
    """A read_committed consumer could not reach a partition's end: a transaction there
    was never committed or aborted."""


def read_to_end(
    kafka: KafkaSettings, partitions: Mapping[str, TopicPartition], timeout: float = 120.0
) -> dict[str, list[Message]]:
    """Every committed record of `partitions` (name -> partition), from the beginning to
    the high watermark, read with read_committed until every position stands at the high
    watermark and the watermarks stay put. Call it once nothing writes there any more (a
    writer that was killed: after `wait_out_transactions`). Raises `Unresolved` after
    `timeout` s."""
    consumer = Consumer(
        {
            **kafka.common(),
            "group.id": f"final-read-{uuid.uuid4().hex[:10]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    names = {(tp.topic, tp.partition): name for name, tp in partitions.items()}
    got: dict[str, list[Message]] = {name: [] for name in partitions}
    deadline = time.monotonic() + timeout
    # One ListOffsets request for all partitions (read_committed: the end is the last
    # stable offset). Not the consumer's get_watermark_offsets: one call per partition,
    # each queued behind the consumer's fetch long-poll on the broker's connection,
    # took about fetch.wait.max.ms (0.5 s) apiece.
    admin = AdminClient(kafka.common())

    def offsets(spec: OffsetSpec) -> dict[str, int]:
        futures = admin.list_offsets(
            {TopicPartition(tp.topic, tp.partition): spec for tp in partitions.values()},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=30,
        )
        found = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        return {n: found[(tp.topic, tp.partition)] for n, tp in partitions.items()}

    def ends() -> dict[str, int]:
        return offsets(OffsetSpec.latest())

    try:
        at = offsets(OffsetSpec.earliest())
        consumer.assign(
            [TopicPartition(tp.topic, tp.partition, at[n]) for n, tp in partitions.items()]
        )
        end = ends()
        while True:
            behind = [n for n in partitions if at[n] < end[n]]
            if not behind:
                end, before = ends(), end
                if end == before:
                    return got
                continue
            if time.monotonic() > deadline:
                raise Unresolved(
                    f"read_committed could not reach the end in {timeout:.0f} s on: "
                    + ", ".join(f"{n} (at {at[n]} of {end[n]})" for n in behind)
                )
            for m in consumer.consume(1000, 0.5):
                name, err = names[(m.topic(), m.partition())], m.error()
                if err is None:
                    got[name].append(m)
                    at[name] = max(at[name], m.offset() + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    at[name] = max(at[name], m.offset())
                else:
                    log.warning("reading %s: %s", name, err)
            for tp in consumer.position([partitions[n] for n in behind]):
                name = names[(tp.topic, tp.partition)]
                at[name] = max(at[name], tp.offset)
    finally:
        consumer.close()


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
    t, bands = settings.topology, settings.priority.bands
    dests = {
        "send": {f"transfer[{p}]": (t.transfer_topic, p) for p in range(t.receive_units)},
        "receive": {q: (q, 0) for q in t.receive_queues},
    }
    # every destination's partition on each band topic, read under a name of its own
    lanes = {
        lane_name(d, b): TopicPartition(band_topic(topic, b), p)
        for side in dests.values()
        for d, (topic, p) in side.items()
        for b in range(bands)
    }
    wait_out_transactions(settings.kafka.transaction_timeout_ms, stopped_at)
    messages = read_to_end(settings.kafka, lanes, timeout)
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
) -> Report:
    """`verify` over both sides' final reads, interleavings judged by the capacity rule
    (`disturbances`: what the driver did that may have held releases up); with
    `accounts` (`read_accounts`), every message delivered, expired or dead-lettered."""
    capacity = CapacitySpec(
        send.destinations, receive.destinations, release_slack_ms, tuple(disturbances)
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
    """A decoded ExpiredMessage event, as `ops.harness.accounts` judges it."""
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
