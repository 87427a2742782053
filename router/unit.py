"""A transfer unit: consume a batch, route it with one Redis round trip, forward it in a
Kafka transaction that also commits the consumed offsets, then settle the batch.

The same loop serves both sides (`SideSpec`): send units consume the send queues and
forward to partitions of the transfer topic; receive units consume the transfer topic and
forward to receive queues.

Per batch:
1. read each message's routing headers once; bad input becomes a dead letter with its
   reason (see `router.contract`), never a crash and never a silent drop;
2. one `route` round trip decides every destination, and keeps the groups of bad messages
   whole (poison policy: dead-letter the message and continue the group, or stop the group
   and park its later messages; a continuation with no entry is parked as an orphan);
3. one transaction: forwarded messages (order within a source partition is kept), dead
   letters and parked messages, alert events, and the consumed offsets, then commit;
4. after the commit, one `settle` round trip ends the batch's in-flight lease and releases
   the groups whose final message it committed. If the unit dies before this, the lease
   expires and the sweeper releases the finals once it sees the committed offsets, so a
   replay can never send the rest of a group elsewhere.

Redis or Kafka unavailable: nothing is forwarded, the batch is rewound, partitions are
paused while the unit backs off (it keeps polling, so it stays in its consumer group).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from router import clients, contract, events, schemas
from router.config import RouterSettings
from router.contract import BadInput, Routing
from router.faults import Faults
from router.metrics import Metrics, MetricsPublisher, metrics_key
from router.routing import HELD, ORPHAN, PARKED
from router.side import SideSpec, table_for

log = logging.getLogger("router.unit")

TP = tuple[str, int]
TXN_TIMEOUT_S = 30.0
# How long a stop request waits for a transaction that is finishing a batch.
STOP_GRACE_S = 10.0
TRACK_DELIVERY_BYTES = 65_536  # larger records get a delivery report (broker rejections)
BROKER_REJECTIONS = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_MSG_SIZE,
}


class FatalUnitError(RuntimeError):
    """The unit cannot continue (fenced producer, fatal client error); exit non-zero."""


class _CallThread:
    """Runs one call at a time on a daemon thread, with a deadline. A call that never
    returns is abandoned with its thread (a daemon never holds up the process's exit)."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], Any]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._work, name="txn-call", daemon=True).start()

    def _work(self) -> None:
        while True:
            call, args, done = self._tasks.get()
            try:
                done.put((True, call(*args)))
            except BaseException as exc:
                done.put((False, exc))

    def submit(self, call: Callable[..., Any], args: tuple[Any, ...]) -> _Done:
        done: _Done = queue.SimpleQueue()
        self._tasks.put((call, args, done))
        return done

    @staticmethod
    def wait(done: _Done, timeout: float, stop: threading.Event, grace: float) -> Any:
        """The call's result. queue.Empty on the deadline, or `grace` seconds after `stop`
        is set, whichever comes first."""
        deadline = time.monotonic() + timeout
        stopping = False
        while True:
            now = time.monotonic()
            if not stopping and stop.is_set():
                stopping = True
                deadline = min(deadline, now + grace)
            if now >= deadline:
                raise queue.Empty
            try:
                ok, value = done.get(timeout=min(deadline - now, 0.25))
                break
            except queue.Empty:
                continue
        if ok:
            return value
        raise value


_Done = queue.SimpleQueue[tuple[bool, Any]]


@dataclass(slots=True)
class _Hold:
    offset: int
    since: float  # monotonic time it was first held
    resume_at: float


@dataclass(slots=True)
class _Item:
    """One consumed message, as the batch handles it."""

    m: Message
    headers: list[tuple[str, bytes | None]] | None
    routing: Routing | None  # None: bad input
    bad: BadInput | None = None
    stop: bool = False  # bad, and its group's policy is stop-group
    routed: bool = False  # part of the route call


@dataclass(slots=True)
class _Batch:
    items: list[_Item] = field(default_factory=list)
    first: dict[TP, int] = field(default_factory=dict)
    last: dict[TP, int] = field(default_factory=dict)

    def track(self, m: Message) -> TP:
        """Note the message's position (first and last offset per partition)."""
        tp = (m.topic(), m.partition())
        if tp not in self.first:
            self.first[tp] = m.offset()
        self.last[tp] = m.offset()
        return tp


@dataclass(slots=True)
class _Decided:
    """A batch classified and routed, ready to be produced (or failed: `failure`)."""

    batch: _Batch
    batch_id: str
    decisions: dict[int, str]
    held_at: dict[TP, int]
    table_reset: tuple[str, str] | None
    now: float
    failure: str | None = None


@dataclass(slots=True)
class _InFlight:
    """A batch produced; its offsets and commit run on the call thread meanwhile."""

    decided: _Decided
    done: _Done
    ordinary_dests: set[str]
    finals: list[tuple[str, str]]
    forwarded: int
    grouped: int
    dead: int
    parked: int


def _where(m: Message) -> str:
    return f"{m.topic()}[{m.partition()}]@{m.offset()}"


class TransferUnit:
    kind = "unit"  # roles are "<side>-<kind>": logs, metrics and pid files name them

    def __init__(
        self,
        settings: RouterSettings,
        spec: SideSpec,
        *,
        redis_client: redis.Redis | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.role = f"{spec.side}-{self.kind}"
        self.instance = clients.instance_id()
        self.metrics = Metrics()
        self.faults = faults or Faults()
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
        # One transactional ID per process, kept when the producer is replaced: the new
        # instance's init_transactions fences the old one, so nothing an old (even stuck)
        # instance still has in flight can ever commit.
        self._txn_id = clients.transactional_id(settings, spec.side)
        self._txn_calls = _CallThread()
        self._producer = self._new_producer()
        self._consumer = Consumer(clients.consumer_config(kafka, spec.group_id, self.instance))
        self._assigned: set[TP] = set()
        self._lanes: dict[TP, str] = {}
        self._holds: dict[TP, _Hold] = {}
        self._txn_open = False
        self._inflight: _InFlight | None = None
        self._producer_broken = False
        self._abort_failures = 0
        self._backoff_ms = 0
        self._backoff_until = 0.0
        self._batches = 0
        self._max_record = kafka.max_message_bytes
        # Source positions whose record the broker refused (e.g. too large for the
        # destination topic): dead-lettered when the batch is replayed.
        self._rejected: dict[tuple[str, int, int], str] = {}
        self._validators = self._payload_validators() if spec.side == "send" else {}

    def _payload_validators(self) -> dict[str, Callable[[bytes], None]]:
        """Message type -> a check that the payload decodes with the type's Avro schema."""
        out: dict[str, Callable[[bytes], None]] = {}
        for message_type, name in self.settings.routing.schema_by_type.items():
            schemas.load(name)  # fails at start-up if the schema is missing
            out[message_type] = partial(schemas.validate, name)
        return out

    # ------------------------------------------------------------------ lifecycle

    def request_stop(self) -> None:
        """Finish the current batch, commit, leave the group, exit (SIGTERM does this)."""
        self._stop.set()

    def run(self) -> int:
        log.info(
            "%s %s starting: %s -> %d destinations, group %s%s",
            self.role,
            self.instance,
            ",".join(self.spec.sources),
            len(self.spec.destinations),
            self.spec.group_id,
            f", FAULT INJECTION {self.faults.probability}" if self.faults else "",
        )
        while True:
            try:
                self._txn(self._producer.init_transactions, TXN_TIMEOUT_S, holds_batch=False)
                break
            except KafkaException as exc:
                if self._stop.is_set():
                    return 0
                log.warning("cannot start transactions yet (broker away?), retrying: %s", exc)
                if exc.args[0].fatal():
                    self._producer = self._new_producer()
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
            self._next_batch()
        try:
            self._producer.poll(0)
        except KafkaException as exc:  # confluent-kafka raises a fatal error from poll()
            if not exc.args[0].fatal():
                raise
            if not self._producer_broken:
                self._producer_broken = True
                self._start_backoff(f"transactional producer failed: {exc.args[0]}")
        self._publisher.maybe_publish()

    def _shutdown(self) -> None:
        log.info("%s %s stopping", self.role, self.instance)
        if self._inflight is not None:
            self._complete()
        self._abort()
        self._publisher.maybe_publish(force=True)
        self._consumer.close()  # leaves the consumer group now, not at session timeout
        # Everything a unit produces travels in transactions, which commit flushed: nothing
        # is left to deliver. A broken producer's leftovers belong to a transaction the
        # coordinator aborts, so waiting for them would only delay the exit.

    # ------------------------------------------------------------------ rebalancing

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned.add((tp.topic, tp.partition))
            self._holds.pop((tp.topic, tp.partition), None)
        self.metrics.inc("rebalances")
        log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        # Both group protocols the units use (KIP-848, cooperative-sticky) are incremental.
        # librdkafka keeps a partition's pause flag across losing and regaining it, so say
        # explicitly what a (re)assigned partition should be: paused while backing off.
        consumer.incremental_assign(partitions)
        if partitions:
            if self._backoff_until:
                consumer.pause(partitions)
            else:
                consumer.resume(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._inflight is not None:
            self._complete()  # its offsets are committed before the partitions move on
        for tp in partitions:
            self._assigned.discard((tp.topic, tp.partition))
            self._holds.pop((tp.topic, tp.partition), None)
        self.metrics.inc("rebalances")
        log.info("revoked %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))

    # ------------------------------------------------------------------ polling

    def _poll_batch(self, timeout: float | None = None) -> list[Message]:
        """Wait for one message (up to poll_timeout_ms, or `timeout` s), then take whatever
        else is already fetched."""
        if timeout is None:
            timeout = self.settings.unit.poll_timeout_ms / 1000
        first = self._consumer.poll(timeout)
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

    def _next_batch(self) -> None:
        """Poll and decide the next batch while the previous one's transaction commits on
        the call thread, then complete that one (settle its table entries) and produce
        this one. Deciding first is safe: a batch decided but never produced is the same
        as a unit dying between routing and producing (replays find the same entries)."""
        if self._inflight is not None and (
            self._inflight.decided.held_at or not self.settings.unit.overlap_commit
        ):
            self._complete()  # held partitions are rewound before polling on
        self._resume_due_holds(time.monotonic())
        messages = self._poll_batch(0.0 if self._inflight is not None else None)
        decided = self._decide(messages) if messages else None
        if self._inflight is not None:
            previous = self._inflight.decided.batch
            if not self._complete():
                if decided is not None and not self._producer_broken:
                    # Rewound with the batch before it (a broken producer's replacement
                    # rewinds every partition to its committed offset anyway).
                    for tp, offset in decided.batch.first.items():
                        if tp not in previous.first:
                            self._seek(tp[0], tp[1], offset)
                return
        if decided is None:
            return
        if decided.failure is not None:
            self._fail(decided.failure, decided.batch)
            return
        self._produce_batch(decided)

    def _decide(self, messages: list[Message]) -> _Decided:
        """Classify the batch and route it in one Redis round trip."""
        batch = self._classify(messages)
        self._batches += 1
        batch_id = f"{self.instance}:{self._batches}"
        args = self.table.head_args(batch_id)
        now = time.monotonic()
        hold_timeout = self.settings.routing.hold_timeout_ms / 1000
        routed: list[_Item] = []
        for item in batch.items:
            m = item.m
            if item.routing is not None:
                gid, final, ttl, seq = (
                    item.routing.guarantee_id,
                    item.routing.final,
                    item.routing.ttl_ms,
                    item.routing.seq,
                )
                flags = "f" if final else ""
                if item.bad is not None:  # e.g. an undecodable payload: poison in its group
                    flags += "p" if item.stop else "d"
            elif item.bad is not None and item.bad.guarantee_id is not None:
                gid, final, ttl, seq = (
                    item.bad.guarantee_id,
                    False,
                    self.settings.routing.default_ttl_ms,
                    item.bad.seq,
                )
                flags = "p" if item.stop else "d"
            else:
                continue  # bad, and no group to keep whole: dead-lettered as it is
            tp = (m.topic(), m.partition())
            lane = self._lane(tp)
            hold = self._holds.get(tp)
            if hold is not None and hold.offset == m.offset() and now - hold.since >= hold_timeout:
                flags += "s"
                self.metrics.inc("hold_timeouts")
            if gid is not None and seq:
                flags += "c"
            args += (gid or "", flags, ttl, f"{lane}/{m.offset()}" if final else "", lane)
            item.routed = True
            routed.append(item)
        t0 = time.perf_counter_ns()
        epoch = self.table.epoch
        resets = self.table.resets
        try:
            result = self.table.route_raw(args, len(routed))
        except redis.RedisError as exc:
            self.metrics.inc("redis_errors")
            return _Decided(
                batch, batch_id, {}, {}, None, now, f"Redis unavailable, nothing forwarded: {exc}"
            )
        if routed:
            self.metrics.inc("redis_round_trips")
            self.metrics.inc("route_us", (time.perf_counter_ns() - t0) // 1000)
        self.metrics.inc("busy_shared", result.shared)
        self.metrics.inc("busy_held", result.held)
        self.metrics.inc("orphans", result.orphans)
        table_reset = self.table.resets > resets
        if table_reset:
            self.metrics.inc("table_resets")
            log.error(
                "%s table lost (epoch %s -> %s): Redis came back without its data? Groups "
                "with sequence numbers are protected; open groups without them may split.",
                self.spec.side,
                epoch,
                self.table.epoch,
            )
        decisions = dict(zip((id(i) for i in routed), result.decisions, strict=True))
        held_at: dict[TP, int] = {}
        for item in routed:
            if decisions[id(item)] == HELD:
                held_at[(item.m.topic(), item.m.partition())] = item.m.offset()
        if self.faults.hit("after_route"):
            self.faults.die("after_route")
        return _Decided(
            batch,
            batch_id,
            decisions,
            held_at,
            (epoch, self.table.epoch) if table_reset else None,
            now,
        )

    def _produce_batch(self, decided: _Decided) -> None:
        """Open the batch's transaction, produce it, and hand its offsets and commit to
        the call thread; `_complete` collects the outcome."""
        offsets = self._offsets(decided.batch, decided.held_at)
        if not offsets:  # everything held at the head of its partition
            self._apply_holds(decided.batch, decided.held_at, decided.now)
            return
        try:
            self._producer.begin_transaction()
            self._txn_open = True
            if decided.table_reset is not None:
                self._event(
                    events.TABLE_RESET,
                    None,
                    events.table_reset(
                        side=self.spec.side,
                        topology=self.settings.topology.name,
                        previous=decided.table_reset[0],
                        epoch=decided.table_reset[1],
                        unit=self.instance,
                        now_ms=int(time.time() * 1000),
                    ),
                )
            produced = self._produce_items(decided)
        except KafkaException as exc:
            self._kafka_failed(exc, decided.batch)
            return
        done = self._txn_calls.submit(
            self._finish_transaction,
            (self._producer, offsets, self._consumer.consumer_group_metadata()),
        )
        self._inflight = _InFlight(decided, done, *produced)

    def _finish_transaction(
        self, producer: Producer, offsets: list[TopicPartition], group_metadata: Any
    ) -> None:
        """On the call thread: the batch's offsets into its transaction, then commit."""
        producer.send_offsets_to_transaction(offsets, group_metadata, TXN_TIMEOUT_S)
        if self.faults.hit("after_produce"):
            producer.flush(TXN_TIMEOUT_S)  # on the broker, inside the open transaction
            self.faults.die("after_produce")
        for attempt in range(5):
            try:
                producer.commit_transaction(TXN_TIMEOUT_S)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and not err.txn_requires_abort() and attempt < 4:
                    log.warning("commit failed (retriable), retrying: %s", err)
                    continue
                raise

    def _complete(self) -> bool:
        """Wait for the batch in flight to commit; then settle it in the table and apply
        its holds. False if its transaction failed (the batch is rewound, backing off)."""
        inflight = self._inflight
        assert inflight is not None
        self._inflight = None
        decided = inflight.decided
        try:
            self._wait_call(inflight.done, "commit_transaction", TXN_TIMEOUT_S * 2 + 15)
        except KafkaException as exc:
            self._kafka_failed(exc, decided.batch)
            return False
        self._txn_open = False
        if self.faults.hit("after_commit"):
            self.faults.die("after_commit")
        m = self.metrics
        m.inc("batches")
        m.inc("txn_commits")
        m.inc("messages_in", inflight.forwarded + inflight.dead + inflight.parked)
        m.inc("messages_out", inflight.forwarded)
        m.inc("grouped", inflight.grouped)
        m.inc("ordinary", inflight.forwarded - inflight.grouped)
        m.inc("finals", len(inflight.finals))
        m.inc("dead_letters", inflight.dead)
        m.inc("parked", inflight.parked)
        self._backoff_ms = 0
        finals, ordinary_dests = inflight.finals, inflight.ordinary_dests
        if finals or ordinary_dests:
            try:
                m.inc("released", self.table.settle(decided.batch_id, ordinary_dests, finals))
                m.inc("redis_round_trips")
            except redis.RedisError as exc:
                # Committed but not settled: the lease expires by itself, the entries stay
                # closing until the sweeper sees the committed offsets. Nothing can split.
                m.inc("redis_errors")
                m.inc("release_failures", len(finals))
                log.warning(
                    "settling the batch failed (%d finished groups left to the sweeper): %s",
                    len(finals),
                    exc,
                )
        self._apply_holds(decided.batch, decided.held_at, decided.now)
        return True

    def _kafka_failed(self, exc: KafkaException, batch: _Batch) -> None:
        err = exc.args[0]
        self.metrics.inc("kafka_errors")
        if err.fatal():
            # E.g. fenced after the coordinator aborted a transaction that outlived
            # transaction_timeout_ms (a long broker outage). Nothing of the batch was
            # committed: start a new producer and replay.
            self._producer_broken = True
        self._fail(f"Kafka transaction failed, batch rewound: {err}", batch)

    def _classify(self, messages: list[Message]) -> _Batch:
        batch = _Batch()
        rules = self.settings.routing
        validators = self._validators
        for m in messages:
            tp = batch.track(m)
            try:
                headers = contract.read_headers(m)
            except BadInput as bad:  # a header name that is not UTF-8
                batch.items.append(_Item(m, None, None, bad))
                continue
            item = _Item(m, headers, None)
            try:
                r = contract.parse(headers, rules)
                item.routing = r
                value, key = m.value(), m.key()
                size = (len(value) if value else 0) + (len(key) if key else 0)
                if headers:
                    size += sum(len(k) + (len(v) if v else 0) for k, v in headers)
                if size > self._max_record:
                    raise r.bad(
                        "oversized",
                        f"record of {size} bytes exceeds the {self._max_record} bytes "
                        "a destination accepts (kafka.max_message_bytes)",
                    )
                rejected = self._rejected.pop((tp[0], tp[1], m.offset()), None)
                if rejected is not None:
                    raise r.bad("rejected-by-broker", rejected)
                check = validators.get(r.message_type or "") if validators else None
                if check is not None:
                    try:
                        check(value or b"")
                    except Exception as exc:
                        raise r.bad(
                            "undecodable-payload",
                            f"payload is not a {rules.schema_by_type[r.message_type or '']}: {exc}"[
                                :500
                            ],
                        ) from None
            except BadInput as bad:
                item.bad = bad
                policy = (
                    bad.on_poison
                    or rules.poison_policy_by_type.get(bad.message_type or "")
                    or rules.poison_policy
                )
                item.stop = bad.guarantee_id is not None and policy == "stop-group"
            batch.items.append(item)
        return batch

    def _produce_items(
        self, decided: _Decided
    ) -> tuple[set[str], list[tuple[str, str]], int, int, int, int]:
        """Produce the batch's messages inside the open transaction. Returns the
        destinations ordinary messages went to, the finals forwarded, and the counts
        forwarded, grouped, dead-lettered and parked."""
        batch, decisions, held_at = decided.batch, decided.decisions, decided.held_at
        spec = self.spec
        add_origin = spec.side == "send"
        forwarded = grouped = dead = parked = 0
        finals: list[tuple[str, str]] = []
        ordinary_dests: set[str] = set()
        for item in batch.items:
            m = item.m
            tp = (m.topic(), m.partition())
            held = held_at.get(tp)
            if held is not None and m.offset() >= held:
                continue  # held, or behind a held message of its partition
            dest = decisions.get(id(item)) if item.routed else None
            if dest in (PARKED, ORPHAN):
                parked += 1
                self._park(item, dest)
                continue
            if item.bad is not None:
                dead += 1
                self._dead_letter(item.m, item.headers, item.bad)
                continue
            assert dest is not None and item.routing is not None
            r = item.routing
            topic, partition = spec.target(dest)
            headers = item.headers
            if add_origin:
                origin = (contract.ORIGIN, f"{m.topic()}/{m.partition()}/{m.offset()}".encode())
                headers = [*headers, origin] if headers else [origin]
            self._produce_forward(topic, partition, m, headers)
            forwarded += 1
            if r.guarantee_id is None:
                ordinary_dests.add(dest)
            else:
                grouped += 1
                if r.final:
                    finals.append((r.guarantee_id, f"{self._lane(tp)}/{m.offset()}"))
        return ordinary_dests, finals, forwarded, grouped, dead, parked

    @staticmethod
    def _offsets(batch: _Batch, held_at: dict[TP, int]) -> list[TopicPartition]:
        """Where each partition of the batch resumes: after its last message, or at its
        held message."""
        offsets = []
        for tp, last in batch.last.items():
            nxt = held_at.get(tp, last + 1)
            if nxt > batch.first[tp]:
                offsets.append(TopicPartition(tp[0], tp[1], nxt))
        return offsets

    def _produce_forward(self, topic: str, partition: int, m: Message, headers: Any) -> None:
        value, key = m.value(), m.key()
        ts_type, ts = m.timestamp()
        on_delivery = None
        if value is not None and len(value) > TRACK_DELIVERY_BYTES:
            source = (m.topic(), m.partition(), m.offset())

            def on_delivery(err: KafkaError | None, _msg: Any) -> None:
                if err is not None and err.code() in BROKER_REJECTIONS:
                    self._rejected[source] = f"the broker refused the record: {err}"

        self._produce(topic, partition, key, value, headers, ts if ts_type else 0, on_delivery)

    def _produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
        timestamp: int = 0,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> None:
        while True:
            try:
                if on_delivery is None:
                    self._producer.produce(
                        topic,
                        value,
                        key,
                        partition=partition,
                        headers=headers,
                        timestamp=timestamp,
                    )
                else:
                    self._producer.produce(
                        topic,
                        value,
                        key,
                        partition=partition,
                        headers=headers,
                        timestamp=timestamp,
                        on_delivery=on_delivery,
                    )
                return
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain

    def _dead_letter(
        self, m: Message, headers: list[tuple[str, bytes | None]] | None, bad: BadInput
    ) -> None:
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
            headers=headers,
            now_ms=int(time.time() * 1000),
            max_value_bytes=self._max_record,
        )
        out_headers = [
            (schemas.SCHEMA_HEADER, events.DEAD_LETTER.encode()),
            ("reason", bad.code.encode()),
        ]
        self._produce(self.settings.topology.dead_letter_topic, -1, m.key(), record, out_headers)
        log.warning("dead-lettered %s: %s", _where(m), bad)

    def _park(self, item: _Item, decision: str) -> None:
        """A message of a stopped group, or an orphan: dead-lettered, in order, and
        forwarded nowhere. A malformed one keeps its own reason."""
        m = item.m
        gid = (
            (item.routing.guarantee_id if item.routing else None)
            or (item.bad.guarantee_id if item.bad else None)
            or ""
        )
        if decision == ORPHAN:
            self.metrics.inc("orphans_parked")
            reason = item.bad or BadInput(
                "group-entry-missing",
                f"group {gid!r} continues (sequence > 0) but has no table entry: it expired "
                "or the table was lost; routing it anew could split the group",
            )
        elif item.bad is not None and item.stop:
            reason = item.bad
            self.metrics.inc("groups_stopped")
            log.error("stopping group %r at %s: %s (policy stop-group)", gid, _where(m), item.bad)
            self._event(
                events.GROUP_STOPPED,
                gid.encode(),
                events.group_stopped(
                    gid,
                    item.bad,
                    side=self.spec.side,
                    topology=self.settings.topology.name,
                    unit=self.instance,
                    topic=m.topic(),
                    partition=m.partition(),
                    offset=m.offset(),
                    now_ms=int(time.time() * 1000),
                ),
            )
        else:
            reason = item.bad or BadInput(
                "group-stopped", f"group {gid!r} is stopped (policy stop-group); parked"
            )
        self._dead_letter(m, item.headers, reason)

    def _event(self, schema: str, key: bytes | None, record: bytes) -> None:
        self._produce(
            self.settings.topology.events_topic,
            -1,
            key,
            record,
            [(schemas.SCHEMA_HEADER, schema.encode())],
        )

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

    def _new_producer(self) -> Producer:
        return Producer(
            clients.transactional_producer_config(self.settings.kafka, self._txn_id, self.instance)
        )

    def _txn(self, call: Callable[..., Any], *args: Any, holds_batch: bool = True) -> Any:
        """A transactional call that talks to the broker, on the call thread."""
        done = self._txn_calls.submit(call, args)
        return self._wait_call(done, call.__name__, TXN_TIMEOUT_S + 15, holds_batch)

    def _wait_call(self, done: _Done, name: str, timeout: float, holds_batch: bool = True) -> Any:
        """The outcome of a call on the call thread, with a hard deadline. librdkafka has
        been seen to block past its own timeout when a coordinator disappears; such a
        call is abandoned (the producer is then replaced and the old one fenced).

        A stop request (SIGTERM) gives a call that finishes a batch STOP_GRACE_S to
        complete, and abandons one that holds no batch (init_transactions) at once: with
        the broker away, a unit still stops promptly. An abandoned batch was not committed;
        the partition's next owner replays it."""
        grace = STOP_GRACE_S if holds_batch else 0.0
        try:
            return self._txn_calls.wait(done, timeout, self._stop, grace)
        except queue.Empty:
            self._txn_calls = _CallThread()  # the stuck one stays blocked, abandoned
            self._producer_broken = True
            why = "abandoned: stopping" if self._stop.is_set() else "did not return"
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{name} {why}")) from None

    def _replace_producer(self) -> bool:
        """After a fatal or stuck producer: a new instance with the same transactional ID
        (init_transactions fences the old one and resolves its transaction), then resume
        every partition from the group's committed offset, which says exactly what was
        committed even when the old transaction's outcome was unknown. False if the broker
        is not back yet (the back-off repeats)."""
        producer = self._new_producer()
        try:
            self._txn(producer.init_transactions, TXN_TIMEOUT_S, holds_batch=False)
            assigned = [TopicPartition(t, p) for t, p in self._assigned]
            committed = (
                self._consumer.committed(assigned, timeout=TXN_TIMEOUT_S) if assigned else []
            )
        except KafkaException as exc:
            log.warning("a new producer could not start yet: %s", exc)
            return False
        self._producer = producer
        self._producer_broken = False
        self._txn_open = False
        self._abort_failures = 0
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self._seek(tp.topic, tp.partition, offset)
        self.metrics.inc("producer_restarts")
        log.warning(
            "replaced the transactional producer (same transactional ID: the old one is "
            "fenced); resuming %d partitions from their committed offsets",
            len(committed),
        )
        return True

    def _fail(self, reason: str, batch: _Batch) -> None:
        """Abort, rewind the batch, pause everything and back off. With a broken producer
        the outcome of its transaction is unknown: the replacement resumes from the
        committed offsets instead of the batch start."""
        self._abort()
        if not self._producer_broken:
            for tp, offset in batch.first.items():
                self._seek(tp[0], tp[1], offset)
        self._start_backoff(reason)

    def _abort(self) -> bool:
        """Abort the open transaction, if any. False if that is still to be done."""
        if not self._txn_open or self._producer_broken:
            return True
        try:
            self._txn(self._producer.abort_transaction, TXN_TIMEOUT_S)
        except KafkaException as exc:
            self._abort_failures += 1
            if exc.args[0].fatal() or self._abort_failures >= 2:
                self._producer_broken = True
            log.warning("abort failed (%d in a row): %s", self._abort_failures, exc)
            return False
        self._txn_open = False
        self._abort_failures = 0
        self.metrics.inc("txn_aborts")
        return True

    def _start_backoff(self, reason: str) -> None:
        u = self.settings.unit
        self._backoff_ms = min(max(self._backoff_ms * 2, u.backoff_initial_ms), u.backoff_max_ms)
        self._backoff_until = time.monotonic() + self._backoff_ms / 1000
        self._consumer.pause([TopicPartition(t, p) for t, p in self._assigned])
        log.warning("%s; backing off %d ms", reason, self._backoff_ms)

    def _resume_after_backoff(self) -> None:
        """End a back-off: finish the abort if it failed before (or replace a broken
        producer), then resume the partitions."""
        if not self._abort() and not self._producer_broken:
            self._backoff_until = time.monotonic() + self._backoff_ms / 1000
            return
        if self._producer_broken and not self._replace_producer():
            self._backoff_until = time.monotonic() + self._backoff_ms / 1000
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
