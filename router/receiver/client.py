"""The receiver library: read receive queues with `read_committed`, commit after processing.

Built like a confluent-kafka `Consumer`, from a librdkafka dict (with `group.id`) and the
topology's name or its queues (`router.config.client`). `poll`, `consume` (a batch),
`receive` and `receive_group` (a whole group at once) hand over messages; `done` marks
them processed. Only processed messages' offsets are committed (every second, before
partitions are revoked, and on close), never past a message received but not yet done
(`OffsetTracker`): a receiver that crashes reprocesses what it had not finished, never
skips it. `process(handler)` is the loop: receive, handle, done. With `state`, each
group's status (last sequence number done, complete or not) is kept in Redis, and read
back by `group_status` after a restart (`router.state.groups`, `router.state.store`).
`abandon` puts a message back at the head of its partition, up to `max_deliveries`
(`router.receiver.redelivery`; the counts in Redis with `state`). A message whose lifetime ended
is not handed out: its ExpiredMessage event is flushed, then it is passed (`expiry`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from router.backends.kafka import clients
from router.backends.redis.client import redis_client
from router.config import client as clientconfig
from router.config.settings import RouterSettings, TracingSettings
from router.errors import ConfigError, InvalidRequest, NotReady, TimedOut
from router.receiver import bandrestore
from router.receiver.bands import ReceiverBands
from router.receiver.expiry_rules import ExpiryOptions
from router.receiver.reassembly import Reassembler, SegmentError, is_segment
from router.receiver.received import (
    Gatherer,
    OffsetTracker,
    Received,
    ReceivedGroup,
    from_message,
    usable,
)
from router.receiver.redelivery import Redeliveries, offsets_of, token_of
from router.receiver.redelivery_rules import MAX_DELIVERIES, RedeliveryOptions
from router.receiver.traced import ReceiveSpans
from router.state.groups import GroupStatus
from router.state.store import State, StatusStore
from router.tracing import setup as tracing_setup

__all__ = [
    "ExpiryOptions",
    "GroupStatus",
    "Hook",
    "OffsetTracker",
    "ReceiveTimeout",
    "Received",
    "ReceivedGroup",
    "Receiver",
    "RedeliveryOptions",
    "SegmentError",
]

log = logging.getLogger("router.receiver")


class ReceiveTimeout(TimedOut):
    """No message arrived within the wait time."""


Hook = Callable[["Receiver", list[TopicPartition]], None]


class Receiver:
    """Reads a topology's receive queues as a consumer group, `read_committed`; commits
    only what the application marked done::

        with Receiver({"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"},
                      "shop") as receiver:
            for message in receiver.consume(100, timeout=1.0):
                handle(message.value)
                receiver.done(message)

    Leaving the `with` block commits what was done and leaves the group.
    `Receiver.from_settings` builds one from the router's settings instead."""

    _bands: ReceiverBands | None = None  # priority bands, if the queues have them
    _tracing: ReceiveSpans | None = None  # spans, if tracing is on (router.receiver.traced)

    def __init__(
        self,
        config: Mapping[str, Any],
        topology: str | None = None,
        *,
        queues: Sequence[str] | None = None,
        assign: bool = False,
        on_assign: Hook | None = None,
        on_revoke: Hook | None = None,
        state: State | None = None,
        state_prefix: str = "router",
        max_deliveries: int | None = MAX_DELIVERIES,
        redelivery: RedeliveryOptions | None = None,
        segment_timeout_s: float = 120.0,
        max_message_bytes: int = 1 << 30,
        expiry: ExpiryOptions | None = ExpiryOptions(),  # noqa: B008 (frozen)
        tracing: TracingSettings | None = None,
        tracer: Any = None,
    ) -> None:
        """`config`: librdkafka properties, as for `confluent_kafka.Consumer`, with the
        `group.id` whose committed offsets record what was processed (see
        `router.config.client` for what is fixed). `topology`: the topology's name, whose
        receive queues `<name>.recv.<n>` are read; or name them with `queues`.

        `assign=True` reads every partition from the committed offset without joining
        the group (a checker reading all queues). `on_assign(receiver, partitions)` is
        called when partitions are assigned; `on_revoke(receiver, partitions)` before they
        are taken away (revoked, or lost), while `done()` still counts for them: what is
        done by then is committed before they move (unless lost). `state` (a Redis URL or
        `redis.Redis`; keys under `state_prefix`, the router's `redis.key_prefix`) keeps
        each group's status for the `group.id`, written before its offsets are stored,
        and delivery counts. `max_deliveries` (0 or None: no limit): the most times an
        abandoned message is handed out; then it is dead-lettered (`max-deliveries`).
        `redelivery`: poison policies, the counts' TTL, topics (`router.receiver.redelivery_rules`).
        `expiry`: lifetime bounds and the default group outcome (None: lifetimes are not
        checked; `router.receiver.expiry_rules`, docs/explanation/receiver.md).

        A segmented message is handed out whole, its checksum verified; a broken one
        raises SegmentError (`router.receiver.reassembly`): a set with no new segment for
        `segment_timeout_s`, or larger than `max_message_bytes`, is broken.

        `tracing` (the router's `tracing` settings) or `tracer` (an application's own
        OpenTelemetry tracer): a span per traced message handed out, and `traced(message)`
        for its handling (`router.receiver.traced`, docs/how-to/tracing.md)."""
        if queues is None and topology is None:
            raise ConfigError("give the topology's name, or its queues")
        cid = str(config.get("client.id") or f"receiver-{clients.instance_id()}")
        group_id = str(config.get("group.id") or "")
        self._status = None if state is None else StatusStore(state, group_id, state_prefix)
        spans = tracing_setup.wrap(tracer) if tracer is not None else None
        if spans is None and tracing is not None:
            spans = tracing_setup.spans_for(tracing, "receiver", cid)
        self._tracing = ReceiveSpans(spans, group_id) if spans is not None else None
        self._redo = Redeliveries(
            config, cid, topology, queues, self._status, state_prefix, max_deliveries,
            redelivery, expiry,
        )  # fmt: skip
        conf = {"logger": clients.LIBRDKAFKA_LOGGER, **config, "on_commit": self._redo.on_commit}
        self._consumer = Consumer(clientconfig.consumer_config(conf, cid))
        peek = {"logger": clients.LIBRDKAFKA_LOGGER, **config}
        self._peek_config = clientconfig.consumer_config(peek, f"{cid}-peek")
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self.received = 0
        self._offsets = OffsetTracker()
        self._gather = Gatherer()
        self._segments = Reassembler(max_message_bytes, segment_timeout_s)
        self._redo.bind(self._consumer, self._offsets, self._gather)
        self._closed = False
        meta = self._consumer.list_topics(timeout=30).topics
        self.queues = list(queues or clientconfig.topology_queues(str(topology), "receive", meta))
        missing = [q for q in self.queues if q not in meta]
        if missing or not self.queues:
            self._consumer.close()
            what = missing or f"{topology}.recv.<n>"
            raise NotReady(f"no receive queues {what} (run `router topics create` first)")
        # priority bands: every band topic of the queues, highest first (router.receiver.bands)
        self._bands = ReceiverBands.of(self._consumer, self.queues, meta)
        topics = self._bands.topics if self._bands is not None else self.queues
        if assign:
            parts = [TopicPartition(q, p) for q in topics for p in meta[q].partitions]
            self._consumer.assign(parts)
            self._assigned(self._consumer, parts)
        else:
            self._consumer.subscribe(
                topics, on_assign=self._assigned, on_revoke=self._revoke, on_lost=self._lost
            )

    @classmethod
    def from_settings(
        cls,
        settings: RouterSettings,
        queues: Sequence[str] | None = None,
        *,
        group_id: str,
        client_id: str | None = None,
        assign: bool = False,
        on_assign: Hook | None = None,
        on_revoke: Hook | None = None,
        keep_status: bool = False,
        max_deliveries: int | None = MAX_DELIVERIES,
        check_lifetimes: bool = True,
    ) -> Receiver:
        """A receiver of `queues` (default: every receive queue of the topology) as
        consumer group `group_id`, with the Kafka settings of the router's settings
        (`keep_status`: group statuses and delivery counts in the settings' Redis;
        `check_lifetimes=False`: hand out expired messages too, as a checker must)."""
        config: dict[str, Any] = {**settings.kafka.common(), "group.id": group_id}
        if client_id is not None:
            config["client.id"] = client_id
        receiver = cls(
            config,
            queues=list(queues or settings.topology.receive_queues),
            assign=assign,
            on_assign=on_assign,
            on_revoke=on_revoke,
            state=redis_client(settings.redis) if keep_status else None,
            state_prefix=settings.redis.key_prefix,
            max_deliveries=max_deliveries,
            redelivery=RedeliveryOptions.of(settings),
            expiry=ExpiryOptions.of(settings) if check_lifetimes else None,
            tracing=settings.tracing,
        )
        if receiver._bands is not None:  # a group without a TTL header: the router's default
            receiver._bands.hold_idle_s = settings.routing.default_ttl_ms / 1000
        return receiver

    def __enter__(self) -> Receiver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Commit what was done and close."""
        self.close()

    # ------------------------------------------------------------------ rebalancing

    def _assigned(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._redo.assigned(partitions)
        if self._bands is not None:  # a group handed out part way before: its band holds
            try:
                committed = self._consumer.committed(list(partitions), timeout=10)
            except KafkaException as exc:
                log.warning("could not read committed offsets to restore band holds: %s", exc)
            else:
                found = bandrestore.peek(self._peek_config, committed)
                self._bands.restore(bandrestore.open_groups(found, self._bands.bases))
        if self._on_assign is not None:
            self._on_assign(self, partitions)

    def _revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Before the partitions move: the application's hook (it may still mark messages
        done), then commit what is done, then forget them."""
        try:
            if self._on_revoke is not None:
                self._on_revoke(self, partitions)
            self.commit()
        except KafkaException as exc:  # the next owner reprocesses from the last commit
            log.warning("could not commit before partitions were revoked: %s", exc)
        finally:
            self._forget(partitions)

    def _lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Lost (the group moved on without us): no commit is possible, only the hook."""
        try:
            if self._on_revoke is not None:
                self._on_revoke(self, partitions)
        finally:
            self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._offsets.forget(key)
            self._gather.forget(key)
            self._segments.forget(key)
            self._redo.forget(key)
            if self._bands is not None:
                self._bands.forget(key)

    # ------------------------------------------------------------------ reading

    def _received(self, m: Message) -> Received | None:
        """The message to hand out; None if it was dead-lettered instead (done)."""
        message = from_message(m)
        bands = self._bands
        # A partition paused after a failure was rewound by `_redo`, which refuses what was
        # fetched of it meanwhile; the band hold must not seek it on, past the held record.
        if bands is not None and not self._redo.holding(message) and not bands.admit(message):
            return None  # another band while a group is handed out: read again after it
        token = None if is_segment(message) else message  # a segment's bytes are not kept
        self._offsets.received((message.topic, message.partition), message.offset, token)
        if not self._redo.admit(message):
            if bands is not None and not self._redo.holding(message):
                bands.done(message)  # accounted for (expired, dead-lettered): done here
            return None
        self.received += 1
        return message

    def poll(self, timeout: float) -> Received | None:
        """The next message, or None after `timeout` seconds; SegmentError for a
        segmented message that cannot be handed over whole."""
        deadline = time.monotonic() + timeout
        while True:
            ready = self._segments.pop(live=self._live)
            if ready is not None:
                return ready if self._tracing is None else self._tracing.handed(ready)
            self._redo.resume_due()
            if self._bands is not None:
                self._bands.before_poll(self._redo.held())
            m = self._consumer.poll(max(deadline - time.monotonic(), 0))
            if m is None:
                self._segments.expire(time.monotonic())  # nothing waits: sets may time out
                if self._segments:
                    continue
                return None
            if usable(m) and (message := self._received(m)) is not None:
                self._segments.add(message, time.monotonic())
                if self._segments:
                    continue
            if time.monotonic() >= deadline:
                return None

    def _live(self, m: Received) -> bool:
        """Not made void by a rewind (`abandon`) since it was read."""
        return self._offsets.is_open((m.topic, m.partition), m.offset)

    def consume(self, num_messages: int = 500, timeout: float = 1.0) -> list[Received]:
        """Up to `num_messages` messages, in each partition's order: waits at most
        `timeout` seconds for the first, then takes what has already been fetched (an
        empty list if nothing came)."""
        if num_messages < 1:
            raise InvalidRequest("num_messages must be at least 1")
        first = self.poll(timeout)
        if first is None:
            return []
        batch = [first]
        if num_messages > 1:
            more = self._consumer.consume(num_messages - 1, 0)
            more.reverse()
            while more:  # let go of each record as it is taken: segments are large
                m = more.pop()
                if usable(m) and (r := self._received(m)) is not None:
                    self._segments.add(r, time.monotonic())
            live = self._live
            while len(batch) < num_messages:
                ready = self._segments.pop(errors=False, live=live)  # an error: next call
                if ready is None:
                    break
                batch.append(ready if self._tracing is None else self._tracing.handed(ready))
        return batch

    def receive(self, timeout: float) -> Received:
        """The next message; raises ReceiveTimeout if none arrives within `timeout` s."""
        message = self.poll(timeout)
        if message is None:
            raise ReceiveTimeout(f"no message on {', '.join(self.queues)} within {timeout}s")
        return message

    def receive_group(self, timeout: float, *, incomplete_after: float = 60.0) -> ReceivedGroup:
        """The next whole group (its members in order, up to its final), or an ordinary
        message on its own; raises ReceiveTimeout if none is ready within `timeout` s.

        Meant for groups sent with whole-group delivery, which arrive contiguously; a
        streamed group is gathered as its members arrive (other messages in between are
        returned first). A group with no new member for `incomplete_after` s is returned
        with `complete=False` (its final will not come: stopped, or dead-lettered), and
        so is the rest of it if it comes after all (its first sequence number is not 0).
        `timeout` 0 polls once without waiting."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            ready = self._gather.next_ready(now, incomplete_after)
            if ready is not None:
                return ready
            m = self.poll(max(min(deadline - now, 0.2), 0.0))  # at least once, even for 0
            if m is None:
                if time.monotonic() >= deadline:
                    queues = ", ".join(self.queues)
                    raise ReceiveTimeout(f"no whole group on {queues} within {timeout}s")
                continue
            single = self._gather.add(m, time.monotonic())
            if single is not None:
                return single

    # ------------------------------------------------------------------ committing

    def done(self, message: Received | ReceivedGroup | SegmentError) -> None:
        """Mark a message, or all of a group (or a SegmentError's records), processed:
        committed once every message received before it on its partition is done too."""
        members: tuple[Received, ...] = (
            (message,) if isinstance(message, Received) else message.messages
        )
        if self._status is not None:  # first: a status is never behind the commit
            self._status.record(members)
            self._redo.expiry.before_done(members)
        for m in members:
            if self._bands is not None:
                self._bands.done(m)  # a final ends its group's band hold
            for offset in offsets_of(m):  # a reassembled message: each segment's
                position = self._offsets.done((m.topic, m.partition), offset, token_of(m))
                if position is not None:
                    self._consumer.store_offsets(
                        offsets=[TopicPartition(m.topic, m.partition, position)]
                    )

    def abandon(self, message: Received | ReceivedGroup) -> None:
        """Give a message (or group) back undone: it, and all handed out after it on its
        partition (`done()` on those no longer counts), comes again before anything later;
        nothing is committed past it. At `max_deliveries` it is dead-lettered instead."""
        first = message if isinstance(message, Received) else message.messages[0]
        if self._bands is not None:  # its group holds the other bands again (a final too)
            self._bands.reopen(first)
        self._redo.abandon(message)

    nack = abandon

    def deliveries(self, message: Received) -> int:
        """How many times this message has been handed out, this time included."""
        return self._redo.deliveries(message)

    def group_status(self, guarantee_id: str) -> GroupStatus | None:
        """How far the application got with a group (its last member marked done, and
        whether that was the final), across restarts; needs `state`."""
        return self._need_state().get(guarantee_id)

    def group_statuses(self) -> dict[str, GroupStatus]:
        """Every recorded group's status (finished ones for a day); needs `state`."""
        return self._need_state().all()

    def _need_state(self) -> StatusStore:
        if self._status is None:
            raise NotReady("group statuses need the Receiver's state= (a Redis URL)")
        return self._status

    def commit(self) -> None:
        """Commit what has been marked done, now (synchronously)."""
        try:
            self._redo.committed(self._consumer.commit(asynchronous=False))
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def process(
        self,
        handler: Callable[[Received], None],
        *,
        idle_timeout: float | None = 5.0,
        max_messages: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Receive, handle, mark done; until nothing arrived for `idle_timeout` s (None:
        never), `max_messages` were handled, or `stop()` is true. Returns the count. A
        handler that raises abandons the message: it comes again (`abandon`)."""
        handled = 0
        last = time.monotonic()
        while max_messages is None or handled < max_messages:
            if stop is not None and stop():
                break
            message = self.poll(0.2)
            if message is None:
                if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                    break
                continue
            last = time.monotonic()
            try:
                with self.traced(message):
                    handler(message)
            except Exception:
                log.warning("handler failed on %s@%d", message.topic, message.offset, exc_info=True)
                self.abandon(message)
                continue
            self.done(message)
            handled += 1
        return handled

    def traced(self, message: Received) -> AbstractContextManager[Any]:
        """A `process` span, current while the block handles `message`, continuing its
        trace (its `traceparent`); with tracing off, a block that does nothing::

            for message in receiver.consume(100, timeout=1.0):
                with receiver.traced(message):
                    handle(message.value)
                receiver.done(message)"""
        if self._tracing is None:
            return nullcontext()
        return self._tracing.processing(message)

    def close(self) -> None:
        """Commit what was done and leave the group (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.commit()
        finally:
            self._consumer.close()
            if self._tracing is not None:
                self._tracing.spans.shutdown()  # exports what is left (a provider of its own)
