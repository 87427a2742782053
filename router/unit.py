"""A transfer unit: consume a batch, route it with one Redis round trip, forward it in a
Kafka transaction that also commits the consumed offsets, then release finished groups.

The same loop serves both sides (`SideSpec`): send units consume the send queues and
forward to partitions of the transfer topic; receive units consume the transfer topic and
forward to receive queues.

Per batch:
1. parse routing headers (bad input is dead-lettered, never dropped, never fatal);
2. one `route` round trip to the side's management table decides every destination;
3. one transaction: produce every message (order within a source partition is kept),
   dead letters, and the consumed offsets (`send_offsets_to_transaction`), then commit;
4. after the commit, one `settle` round trip ends the batch's in-flight lease (the
   destination its ordinary messages went to) and removes the entries of groups whose
   final message was in the batch. If the unit dies before this, the lease expires and
   the entry stays "closing" until the sweeper sees the committed offset and releases it,
   so a replay can never send the rest of a group elsewhere.

Redis or Kafka unavailable: nothing is forwarded, the batch is rewound, partitions are
paused while the unit backs off (it keeps polling, so it stays in its consumer group).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from router import clients, contract, events
from router.config import RouterSettings
from router.contract import BadInput, Routing
from router.metrics import Metrics, MetricsPublisher, metrics_key
from router.routing import HELD
from router.side import SideSpec, table_for

log = logging.getLogger("router.unit")

TP = tuple[str, int]
TXN_TIMEOUT_S = 30.0


class FatalUnitError(RuntimeError):
    """The unit cannot continue (fenced producer, fatal client error); exit non-zero."""


@dataclass(slots=True)
class _Hold:
    offset: int
    since: float  # monotonic time it was first held
    resume_at: float


@dataclass(slots=True)
class _Batch:
    routed: list[tuple[Message, Routing]] = field(default_factory=list)
    dead: list[tuple[Message, BadInput]] = field(default_factory=list)
    first: dict[TP, int] = field(default_factory=dict)
    last: dict[TP, int] = field(default_factory=dict)


def _where(m: Message) -> str:
    return f"{m.topic()}[{m.partition()}]@{m.offset()}"


class TransferUnit:
    def __init__(
        self,
        settings: RouterSettings,
        spec: SideSpec,
        *,
        redis_client: redis.Redis | None = None,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.role = f"{spec.side}-unit"
        self.instance = clients.instance_id()
        self.metrics = Metrics()
        self._stop = threading.Event()
        self._redis = redis_client or clients.redis_client(settings.redis)
        self.table = table_for(settings, spec.side, self._redis)
        self._publisher = MetricsPublisher(
            self.metrics,
            self._redis,
            metrics_key(
                settings.redis.key_prefix, settings.topology.name, self.role, self.instance
            ),
            settings.unit.metrics_interval_ms,
        )
        kafka = settings.kafka
        self._producer = Producer(
            clients.transactional_producer_config(
                kafka, clients.transactional_id(settings, spec.side), self.instance
            )
        )
        self._consumer = Consumer(clients.consumer_config(kafka, spec.group_id, self.instance))
        self._assigned: set[TP] = set()
        self._lanes: dict[TP, str] = {}
        self._holds: dict[TP, _Hold] = {}
        self._txn_open = False
        self._backoff_ms = 0
        self._backoff_until = 0.0
        self._batches = 0
        self._max_record = kafka.max_message_bytes

    # ------------------------------------------------------------------ lifecycle

    def request_stop(self) -> None:
        """Finish the current batch, commit, leave the group, exit (SIGTERM does this)."""
        self._stop.set()

    def run(self) -> int:
        log.info(
            "%s %s starting: %s -> %d destinations, group %s",
            self.role,
            self.instance,
            ",".join(self.spec.sources),
            len(self.spec.destinations),
            self.spec.group_id,
        )
        self._producer.init_transactions(TXN_TIMEOUT_S)
        self._consumer.subscribe(
            list(self.spec.sources),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        try:
            while not self._stop.is_set():
                self.step()
        finally:
            self._shutdown()
        return 0

    def step(self) -> None:
        """One iteration of the loop: wait out a back-off, or handle one batch."""
        if self._backoff_until:
            now = time.monotonic()
            if now < self._backoff_until:
                self._drain_paused(min(self._backoff_until - now, 0.1))
            else:
                self._resume_after_backoff()
        else:
            self._resume_due_holds(time.monotonic())
            batch = self._poll_batch()
            if batch:
                self._handle(batch)
        self._producer.poll(0)
        self._publisher.maybe_publish()

    def _shutdown(self) -> None:
        log.info("%s %s stopping", self.role, self.instance)
        if self._txn_open:
            try:
                self._producer.abort_transaction(TXN_TIMEOUT_S)
            except KafkaException as exc:
                log.warning("abort on shutdown failed: %s", exc)
        self._publisher.maybe_publish(force=True)
        self._consumer.close()  # leaves the consumer group now, not at session timeout
        self._producer.flush(TXN_TIMEOUT_S)

    # ------------------------------------------------------------------ rebalancing

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned.add((tp.topic, tp.partition))
            self._holds.pop((tp.topic, tp.partition), None)
        self.metrics.inc("rebalances")
        log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned.discard((tp.topic, tp.partition))
            self._holds.pop((tp.topic, tp.partition), None)
        self.metrics.inc("rebalances")
        log.info("revoked %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))

    # ------------------------------------------------------------------ polling

    def _poll_batch(self) -> list[Message]:
        """Wait for one message, then take whatever else is already fetched."""
        first = self._consumer.poll(self.settings.unit.poll_timeout_ms / 1000)
        if first is None:
            return []
        messages = [first]
        if self.settings.unit.batch_size > 1:
            messages.extend(self._consumer.consume(self.settings.unit.batch_size - 1, 0))
        good = []
        assigned = self._assigned
        for m in messages:
            err = m.error()
            if err is None:
                # A partition revoked during consume() belongs to another unit now: its
                # offsets must not be committed here.
                if (m.topic(), m.partition()) in assigned:
                    good.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                self._consumer_error(err)
        return good

    def _consumer_error(self, err: KafkaError) -> None:
        self.metrics.inc("kafka_errors")
        if err.fatal():
            raise FatalUnitError(f"fatal consumer error: {err}")
        log.warning("consumer error: %s", err)

    def _drain_paused(self, timeout: float) -> None:
        """Poll while backing off (partitions paused) so the group keeps us; anything
        already fetched is rewound rather than handled."""
        m = self._consumer.poll(timeout)
        if m is not None:
            if m.error() is None:
                self._seek(m.topic(), m.partition(), m.offset())
            else:
                self._consumer_error(m.error())

    # ------------------------------------------------------------------ the batch

    def _lane(self, tp: TP) -> str:
        lane = self._lanes.get(tp)
        if lane is None:
            lane = self._lanes[tp] = f"{tp[0]}/{tp[1]}"
        return lane

    def _handle(self, messages: list[Message]) -> None:
        batch = self._classify(messages)
        self._batches += 1
        batch_id = f"{self.instance}:{self._batches}"
        args = self.table.head_args(batch_id)
        now = time.monotonic()
        hold_timeout = self.settings.routing.hold_timeout_ms / 1000
        for m, r in batch.routed:
            tp = (m.topic(), m.partition())
            lane = self._lane(tp)
            flags = "f" if r.final else ""
            hold = self._holds.get(tp)
            if hold is not None and hold.offset == m.offset() and now - hold.since >= hold_timeout:
                flags += "s"
                self.metrics.inc("hold_timeouts")
            args += (
                r.guarantee_id or "",
                flags,
                r.ttl_ms,
                f"{lane}/{m.offset()}" if r.final else "",
                lane,
            )
        t0 = time.perf_counter_ns()
        try:
            result = self.table.route_raw(args, len(batch.routed))
        except redis.RedisError as exc:
            self.metrics.inc("redis_errors")
            self._fail(f"Redis unavailable, nothing forwarded: {exc}", batch)
            return
        if batch.routed:
            self.metrics.inc("redis_round_trips")
            self.metrics.inc("route_us", (time.perf_counter_ns() - t0) // 1000)
        self.metrics.inc("busy_shared", result.shared)
        self.metrics.inc("busy_held", result.held)

        held_at: dict[TP, int] = {}
        for (m, _), d in zip(batch.routed, result.decisions, strict=True):
            if d == HELD:
                held_at[(m.topic(), m.partition())] = m.offset()

        try:
            ordinary_dests, finals = self._forward(batch, result.decisions, held_at)
        except KafkaException as exc:
            err = exc.args[0]
            self.metrics.inc("kafka_errors")
            if err.fatal():
                raise FatalUnitError(f"fatal producer error: {err}") from exc
            self._fail(f"Kafka transaction failed, batch rewound: {err}", batch)
            return

        self._backoff_ms = 0
        if finals or ordinary_dests:
            try:
                self.metrics.inc("released", self.table.settle(batch_id, ordinary_dests, finals))
                self.metrics.inc("redis_round_trips")
            except redis.RedisError as exc:
                # Committed but not settled: the lease expires by itself, the entries stay
                # closing until the sweeper sees the committed offsets. Nothing can split.
                self.metrics.inc("redis_errors")
                self.metrics.inc("release_failures", len(finals))
                log.warning(
                    "settling the batch failed (%d finished groups left to the sweeper): %s",
                    len(finals),
                    exc,
                )
        self._apply_holds(batch, held_at, now)

    def _classify(self, messages: list[Message]) -> _Batch:
        batch = _Batch()
        rules = self.settings.routing
        for m in messages:
            tp = (m.topic(), m.partition())
            if tp not in batch.first:
                batch.first[tp] = m.offset()
            batch.last[tp] = m.offset()
            try:
                headers = m.headers()
                r = contract.parse(headers, rules)
                value, key = m.value(), m.key()
                size = (len(value) if value else 0) + (len(key) if key else 0)
                if headers:
                    size += sum(len(k) + (len(v) if v else 0) for k, v in headers)
                if size > self._max_record:
                    raise BadInput(
                        "oversized",
                        f"record of {size} bytes exceeds the {self._max_record} bytes "
                        "a destination accepts (kafka.max_message_bytes)",
                    )
            except BadInput as bad:
                batch.dead.append((m, bad))
                continue
            batch.routed.append((m, r))
        return batch

    def _forward(
        self, batch: _Batch, decisions: list[str], held_at: dict[TP, int]
    ) -> tuple[set[str], list[tuple[str, str]]]:
        """Produce the batch and commit it with its offsets in one transaction.

        Returns the destinations ordinary messages went to, and the finals forwarded."""
        offsets = []
        for tp, last in batch.last.items():
            nxt = held_at.get(tp, last + 1)
            if nxt > batch.first[tp]:
                offsets.append(TopicPartition(tp[0], tp[1], nxt))
        if not offsets:
            return set(), []  # everything held at the head of its partition

        self._producer.begin_transaction()
        self._txn_open = True
        spec = self.spec
        add_origin = spec.side == "send"
        forwarded = 0
        grouped = 0
        finals: list[tuple[str, str]] = []
        ordinary_dests: set[str] = set()
        for (m, r), dest in zip(batch.routed, decisions, strict=True):
            if dest[0] == "!":
                continue  # held, or behind a held message of its partition
            topic, partition = spec.target(dest)
            headers = m.headers()
            if add_origin:
                origin = (contract.ORIGIN, f"{m.topic()}/{m.partition()}/{m.offset()}".encode())
                headers = [*headers, origin] if headers else [origin]
            ts_type, ts = m.timestamp()
            self._produce(topic, partition, m.key(), m.value(), headers, ts if ts_type else 0)
            forwarded += 1
            if r.guarantee_id is None:
                ordinary_dests.add(dest)
            else:
                grouped += 1
                if r.final:
                    finals.append(
                        (r.guarantee_id, f"{self._lane((m.topic(), m.partition()))}/{m.offset()}")
                    )
        dead = 0
        for m, bad in batch.dead:
            held = held_at.get((m.topic(), m.partition()))
            if held is not None and m.offset() > held:
                continue
            self._dead_letter(m, bad)
            dead += 1
        self._producer.send_offsets_to_transaction(
            offsets, self._consumer.consumer_group_metadata(), TXN_TIMEOUT_S
        )
        self._commit()
        self._txn_open = False

        m_in = forwarded + dead
        self.metrics.inc("batches")
        self.metrics.inc("txn_commits")
        self.metrics.inc("messages_in", m_in)
        self.metrics.inc("messages_out", forwarded)
        self.metrics.inc("grouped", grouped)
        self.metrics.inc("ordinary", forwarded - grouped)
        self.metrics.inc("finals", len(finals))
        self.metrics.inc("dead_letters", dead)
        return ordinary_dests, finals

    def _produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
        timestamp: int,
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    topic, value, key, partition=partition, headers=headers, timestamp=timestamp
                )
                return
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain

    def _dead_letter(self, m: Message, bad: BadInput) -> None:
        ts_type, ts = m.timestamp()
        record = events.dead_letter(
            bad,
            side=self.spec.side,
            unit=self.instance,
            topic=m.topic(),
            partition=m.partition(),
            offset=m.offset(),
            timestamp_ms=ts if ts_type else None,
            key=m.key(),
            value=m.value(),
            headers=m.headers(),
            now_ms=int(time.time() * 1000),
            max_value_bytes=self._max_record,
        )
        headers = [("schema", events.DEAD_LETTER.encode()), ("reason", bad.code.encode())]
        self._produce(self.settings.topology.dead_letter_topic, -1, m.key(), record, headers, 0)
        log.warning("dead-lettered %s: %s", _where(m), bad)

    def _commit(self) -> None:
        for attempt in range(5):
            try:
                self._producer.commit_transaction(TXN_TIMEOUT_S)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and not err.txn_requires_abort() and attempt < 4:
                    log.warning("commit failed (retriable), retrying: %s", err)
                    continue
                raise

    # ------------------------------------------------------------------ holds

    def _apply_holds(self, batch: _Batch, held_at: dict[TP, int], now: float) -> None:
        for tp, last in batch.last.items():
            hold = self._holds.get(tp)
            if hold is not None and tp not in held_at and hold.offset <= last:
                del self._holds[tp]  # the held message got through
        retry = self.settings.routing.hold_retry_ms / 1000
        for tp, offset in held_at.items():
            previous = self._holds.get(tp)
            since = previous.since if previous and previous.offset == offset else now
            self._holds[tp] = _Hold(offset, since, now + retry)
            self._consumer.pause([TopicPartition(tp[0], tp[1])])
            self._seek(tp[0], tp[1], offset)

    def _resume_due_holds(self, now: float) -> None:
        due = [tp for tp, h in self._holds.items() if h.resume_at and h.resume_at <= now]
        if due:
            for tp in due:
                self._holds[tp].resume_at = 0.0
            self._consumer.resume([TopicPartition(t, p) for t, p in due])

    # ------------------------------------------------------------------ failures

    def _fail(self, reason: str, batch: _Batch) -> None:
        """Abort, rewind the batch, pause everything and back off."""
        if self._txn_open:
            try:
                self._producer.abort_transaction(TXN_TIMEOUT_S)
                self._txn_open = False
                self.metrics.inc("txn_aborts")
            except KafkaException as exc:
                if exc.args[0].fatal():
                    raise FatalUnitError(f"fatal error aborting: {exc}") from exc
                log.warning("abort failed, will retry before the next batch: %s", exc)
        for tp, offset in batch.first.items():
            self._seek(tp[0], tp[1], offset)
        u = self.settings.unit
        self._backoff_ms = min(max(self._backoff_ms * 2, u.backoff_initial_ms), u.backoff_max_ms)
        self._backoff_until = time.monotonic() + self._backoff_ms / 1000
        self._consumer.pause([TopicPartition(t, p) for t, p in self._assigned])
        log.warning("%s; backing off %d ms", reason, self._backoff_ms)

    def _resume_after_backoff(self) -> None:
        """End a back-off: finish the abort if it failed before, resume the partitions."""
        if self._txn_open:
            try:
                self._producer.abort_transaction(TXN_TIMEOUT_S)
                self._txn_open = False
                self.metrics.inc("txn_aborts")
            except KafkaException as exc:
                if exc.args[0].fatal():
                    raise FatalUnitError(f"fatal error aborting: {exc}") from exc
                self._backoff_until = time.monotonic() + self._backoff_ms / 1000
                log.warning("abort still failing, backing off again: %s", exc)
                return
        self._backoff_until = 0.0
        held = {tp for tp, h in self._holds.items() if h.resume_at}
        resume = [TopicPartition(t, p) for t, p in self._assigned if (t, p) not in held]
        if resume:
            self._consumer.resume(resume)
        log.info("resuming after back-off")

    def _seek(self, topic: str, partition: int, offset: int) -> None:
        if (topic, partition) not in self._assigned:
            return  # revoked meanwhile: the next owner starts from the committed offset
        try:
            self._consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as exc:
            # Going on would commit past messages never forwarded. Dying is safe: the
            # group hands the partition on from its last committed offset.
            raise FatalUnitError(
                f"could not rewind {topic}[{partition}] to {offset}: {exc}"
            ) from exc
