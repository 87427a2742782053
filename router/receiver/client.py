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

from confluent_kafka import Consumer, TopicPartition

from router.backends.kafka import clients
from router.backends.redis.client import redis_client
from router.config import client as clientconfig
from router.config.settings import RouterSettings, TracingSettings
from router.errors import ConfigError, NotReady
from router.receiver.bands import ReceiverBands
from router.receiver.expiry_rules import ExpiryOptions
from router.receiver.reading import Reading, ReceiveTimeout
from router.receiver.reassembly import Reassembler, SegmentError
from router.receiver.received import (
    Gatherer,
    OffsetTracker,
    Received,
    ReceivedGroup,
)
from router.receiver.redelivery import Redeliveries
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


Hook = Callable[["Receiver", list[TopicPartition]], None]


class Receiver(Reading):
    """Reads a topology's receive queues as a consumer group, `read_committed`; commits
    only what the application marked done::

        with Receiver({"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"},
                      "shop") as receiver:
            for message in receiver.consume(100, timeout=1.0):
                handle(message.value)
                receiver.done(message)

    Leaving the `with` block commits what was done and leaves the group.
    `Receiver.from_settings` builds one from the router's settings instead."""

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
        marks = {**clientconfig.connection_config(peek), "client.id": f"{cid}-marks"}
        self._bands = ReceiverBands.of(self._consumer, self.queues, meta, marks)
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

    # ------------------------------------------------------------------ committing

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
            if self._bands is not None:
                self._bands.ends.close()  # its admin client, if it made one
            if self._tracing is not None:
                self._tracing.spans.shutdown()  # exports what is left (a provider of its own)
