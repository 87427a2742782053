"""The sender library: put messages on the send queues, groups on one partition in order.

As the patent's sender does, a new group or an ordinary message goes to the send-queue
partition with the least backlog (messages not yet consumed by the send units, see
`router.sender.backlog`); every later message of the group goes to the same partition, numbered
(`guarantee-seq`), so the group keeps its order. The producer is idempotent (no
duplicates or reordering on retries). Delivery failures are never silent: `flush()`
raises `DeliveryFailed` listing them. Configuration: `router.config.client`; what a
caller's own routing headers may say: `router.sender.groups`. With a `sender_id`, open groups
are recorded in Redis and resumed by a sender restarted under that ID
(`router.state.sender`, `router.sender.journal`, `router.state.store`). A payload larger
than `segment_bytes` is sent as segments (`router.contract.segments`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from router.backends.kafka import clients
from router.backends.kafka.endoffsets import EndOffsets
from router.backends.kafka.offsets import CommittedOffsets
from router.backends.redis.client import redis_client
from router.config import client as clientconfig
from router.config.settings import RouterSettings, RoutingSettings, TracingSettings
from router.contract import priority as prio
from router.contract import request as sendrequest
from router.contract import segments
from router.errors import ConfigError
from router.sender import groups as sendgroups
from router.sender.backlog import REQUEST_TIMEOUT_S, Backlog
from router.sender.delivery import TP, Deliveries, OnDelivery, Track
from router.sender.groups import DeliveryFailed, SendReceipt
from router.sender.journal import Journal, OpenGroupInfo, info
from router.sender.traced import SendSpans
from router.state.store import SenderFenced, SenderStore, State
from router.tracing import setup as tracing_setup
from router.utils.clock import Every

__all__ = ["DeliveryFailed", "OpenGroupInfo", "SendReceipt", "Sender", "SenderFenced"]

log = logging.getLogger("router.sender")

Payload = bytes | bytearray | memoryview | None


class Sender:
    """Sends to a topology's send queues: each new group (or ordinary message) to the
    least-backlog partition, every later message of a group to the same one, numbered.

    Built like a confluent-kafka `Producer`, from a librdkafka dict and the topology::

        with Sender({"bootstrap.servers": "127.0.0.1:9092"}, "shop") as sender:
            sender.send(b"line 1", guarantee_id="order-42")
            sender.send(b"line 2", guarantee_id="order-42", final=True)

    Leaving the `with` block flushes (raising DeliveryFailed for messages Kafka refused)
    and closes. `Sender.from_settings` builds one from the router's settings instead.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        topology: str | None = None,
        *,
        send_queues: Sequence[str] | None = None,
        units_group: str | None = None,
        group_idle_s: float = RoutingSettings().default_ttl_ms / 1000,
        default_order: Literal["lane", "logical"] = "lane",
        backlog_refresh_s: float = 1.0,
        sticky_slack: int = 100,
        sender_id: str | None = None,
        state: State | None = None,
        state_prefix: str = "router",
        segment_bytes: int = segments.DEFAULT_SEGMENT_BYTES,
        segment_window: int = 8,
        tracing: TracingSettings | None = None,
        tracer: Any = None,
    ) -> None:
        """`config`: librdkafka properties, as for `confluent_kafka.Producer`
        (`bootstrap.servers`, security, `linger.ms`, ...; idempotence and `acks=all` are
        required, see `router.config.client`). `topology`: the topology's name, whose send
        queues `<name>.send.<n>` and send units' group `<name>.send-units` are used; or
        name them with `send_queues` and `units_group` (the backlog of each partition is
        measured against that group's committed offsets).

        `group_idle_s`: a group with no message for this long is forgotten (give the
        router's longest TTL). `default_order`: the router's `routing.default_order`,
        which says how a caller's own `guarantee-seq` header is checked. Backlogs are
        measured every `backlog_refresh_s`; within `sticky_slack` messages of the least,
        a new group goes where this sender's previous group went.

        `sender_id` with `state` (a Redis URL or `redis.Redis`; keys under `state_prefix`,
        the router's `redis.key_prefix`): open groups are recorded there, and a sender
        built with the same ID resumes them (same partition, next number; see
        `open_groups`, `abandon`). It takes the ID over: the older one's next record
        write raises SenderFenced.

        A payload larger than `segment_bytes` (default 512 KiB, under the topics' 1 MiB
        records) is sent as segments (docs/explanation/segments.md), with at most
        `segment_window` of them unacknowledged at a time.

        `tracing` (the router's `tracing` settings) or `tracer` (an application's own
        OpenTelemetry tracer): a producer span per send, its context in the message's
        `traceparent` header (`router.sender.traced`, docs/how-to/tracing.md)."""
        if send_queues is None and topology is None:
            raise ConfigError("give the topology's name, or its send_queues")
        segments.check_size(segment_bytes, int(config.get("message.max.bytes", 1_000_000)))
        if segment_window < 1:
            raise ConfigError("segment_window must be at least 1")
        self._segment_bytes, self._window_bytes = segment_bytes, segment_window * segment_bytes
        self._lock = threading.Lock()
        group = units_group or (clientconfig.units_group(topology) if topology else None)
        if group is None:
            raise ConfigError("with send_queues, give units_group: the send units' consumer group")
        cid = str(config.get("client.id") or f"sender-{clients.instance_id()}")
        settings = {"logger": clients.LIBRDKAFKA_LOGGER, **config}
        self._out = Deliveries(Producer(clientconfig.producer_config(settings, cid)), self._lock)
        connection = clientconfig.connection_config(settings)
        # An estimate that must never block a send on a pending transaction.
        self._committed = CommittedOffsets(connection, cid, stable=False)
        admin = [AdminClient(connection)]  # for discovery only; the backlog has its own
        try:
            queues, partitions = clientconfig.discover_send_queues(admin[0], send_queues, topology)
            # priority bands: `<queue>.p<b>` beside each queue (router.contract.priority)
            self._bands = prio.bands_in(admin[0].list_topics(timeout=30).topics, queues[0])
        finally:
            clients.dispose_in_background(admin)
        self._queues = queues
        self._ends = EndOffsets(connection, REQUEST_TIMEOUT_S, committed=False)
        self._backlog = Backlog(
            self._ends,
            self._committed,
            group,
            partitions,
            refresh_s=backlog_refresh_s,
            slack=sticky_slack,
        )
        self._groups = sendgroups.OpenGroups(group_idle_s)
        self._default_order = default_order
        self._closed = False
        spans = tracing_setup.wrap(tracer) if tracer is not None else None
        if spans is None and tracing is not None:
            spans = tracing_setup.spans_for(tracing, "sender", cid)
        self._tracing = SendSpans(spans) if spans is not None else None
        self._journal: Journal | None = None
        self._sync = Every(1.0)
        if sender_id is not None:
            if state is None:
                raise ConfigError("sender_id needs state: a Redis URL or client")
            self._journal = self._out.journal = Journal(SenderStore(state, sender_id, state_prefix))
            self._journal.resume_into(self._groups, connection)

    @classmethod
    def from_settings(
        cls,
        settings: RouterSettings,
        *,
        client_id: str | None = None,
        backlog_refresh_s: float = 1.0,
        sticky_slack: int = 100,
        producer_overrides: Mapping[str, Any] | None = None,
        sender_id: str | None = None,
    ) -> Sender:
        """A sender for the topology, Kafka settings and TTLs of the router's settings
        (`producer_overrides`: librdkafka properties on top of `kafka.client_config`);
        with `sender_id`, its open groups are recorded in the settings' Redis. Segments
        are at most 512 KiB, and leave room for headers under `kafka.max_message_bytes`."""
        cid = client_id or f"sender-{clients.instance_id()}"
        config = clients.idempotent_producer_config(settings.kafka, cid)
        config.update(producer_overrides or {})
        routing = settings.routing
        return cls(
            config,
            send_queues=settings.topology.send_queues,
            units_group=settings.topology.send_group,
            group_idle_s=max([routing.default_ttl_ms, *routing.ttl_by_type.values()]) / 1000,
            default_order=routing.default_order,
            backlog_refresh_s=backlog_refresh_s,
            sticky_slack=sticky_slack,
            sender_id=sender_id,
            state=redis_client(settings.redis) if sender_id else None,
            state_prefix=settings.redis.key_prefix,
            segment_bytes=segments.segment_bytes_for(settings.kafka.max_message_bytes),
            tracing=settings.tracing,
        )

    @property
    def sent(self) -> int:
        """Records produced (a segmented message: one per segment)."""
        return self._out.sent

    @property
    def delivered(self) -> int:
        """Records Kafka acknowledged."""
        return self._out.delivered

    @property
    def send_queues(self) -> list[str]:
        """The send queues this sender spreads groups over."""
        return list(self._queues)

    def __enter__(self) -> Sender:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Flush and close; DeliveryFailed if Kafka refused messages (only logged when the
        block is already raising, so that its own exception is the one you see)."""
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except DeliveryFailed as failed:
            log.error("while the sender's block raised %s: %s", exc_type.__name__, failed)

    # ------------------------------------------------------------------ backlog

    def backlog(self) -> dict[TP, int]:
        """Estimated unconsumed messages per send-queue partition."""
        return self._backlog.current()

    # ------------------------------------------------------------------ sending

    def send(
        self,
        value: Payload,
        *,
        guarantee_id: str | None = None,
        final: bool = False,
        key: bytes | None = None,
        message_type: str | None = None,
        ttl_ms: int | None = None,
        headers: Sequence[tuple[str, str | bytes | None]] = (),
        on_delivery: OnDelivery | None = None,
        delivery: Literal["stream", "complete"] | None = None,
        priority: int | None = None,
    ) -> SendReceipt:
        """Send one message; a group's messages go to one partition, numbered, in the
        order sent. Asynchronous, like `Producer.produce`: `flush()` (or leaving the
        `with` block) waits for Kafka's acknowledgements; `on_delivery(err, msg)` is
        called with each.

        `guarantee_id` makes it a member of that group, `final` its last message.
        `delivery="complete"` on a group's first message asks for whole-group delivery
        (docs/explanation/routing.md); None leaves it to the router's configuration. `headers` may
        carry routing headers too (`guarantee-id`, `guarantee-seq`, ...: see
        `router.sender.groups`); they are checked, and InvalidRequest says what is wrong
        with one (a `guarantee-seq` that is not the group's next number, a header given
        twice) before anything is sent.

        A `value` (bytes, bytearray or memoryview) larger than `segment_bytes` is sent as
        segments, one group member each (an ordinary message: a group of its own), with
        at most `segment_window` unacknowledged; a receiver of this library gets it back
        whole. `on_delivery` is called for each segment, and the receipt says how many
        numbers of the group it took.

        `priority` (0..9, or a `message-priority` header in `headers`; default 0): on a
        topology with priority bands, the message goes to its band's send queue
        `<queue>.p<band>` and overtakes lower bands' backlog (docs/explanation/priority.md). A group
        keeps its first message's band: later members' priorities are ignored."""
        span = None
        if self._tracing is not None:  # a producer span; its context goes in `headers`
            span, headers = self._tracing.start(headers)
        try:
            r = sendrequest.request(
                headers,
                guarantee_id=guarantee_id,
                final=final,
                message_type=message_type,
                ttl_ms=ttl_ms,
                delivery=delivery,
                default_order=self._default_order,
            )
            if isinstance(value, str):  # as confluent-kafka takes it
                value = value.encode("utf-8")
            elif value is not None and not isinstance(value, bytes):
                value = memoryview(value).cast("B")
            band, ranked = prio.sender_band(priority, headers, self._bands)
            if value is not None and len(value) > self._segment_bytes:
                view = memoryview(value).cast("B")
                receipt = self._send_segments(view, r, key, on_delivery, band, ranked)
                if span is not None:  # ends once every segment is produced
                    self._traced(span, receipt, r, len(view), None, segmented=True)
                return receipt
            if isinstance(value, memoryview):
                value = value.tobytes()  # produce() takes bytes
            tp, seq, track = self._place(r, band)
        except BaseException as exc:
            if span is not None:
                assert self._tracing is not None
                self._tracing.failed(span, exc)
            raise
        if span is not None:  # ends when Kafka acknowledges it
            receipt = SendReceipt(tp[0], tp[1], seq)
            on_delivery = self._traced(span, receipt, r, len(value or b""), on_delivery)
        routing = sendrequest.routing_headers(r, seq)
        self._out.produce(tp, key, value, [*routing, *r.others, *ranked], on_delivery, track)
        self._backlog.sent(tp)
        self._sync_journal()
        return SendReceipt(tp[0], tp[1], seq)

    def _traced(
        self,
        span: Any,
        at: SendReceipt,
        r: sendrequest.Request,
        size: int,
        on: OnDelivery | None,
        segmented: bool = False,
    ) -> OnDelivery | None:
        """Name the span after where the message went; end it now (`segmented`: every
        segment produced), or return the delivery callback that ends it."""
        assert self._tracing is not None
        SendSpans.placed(span, at.topic, at.partition, r.guarantee_id, at.seq, r.final, size)
        if segmented:
            self._tracing.spans.end(span)
            return None
        return self._tracing.acknowledged(span, on)

    def _place(
        self, r: sendrequest.Request, band: int = 0, record: bool = True
    ) -> tuple[TP, int | None, Track | None]:
        """The partition (of `band`'s send queue), number and journal track of message
        `r` (`record`: journal it). A group's later members follow its first one's lane."""
        if r.guarantee_id is None:
            return prio.lane(self._backlog.least(), band), None, None
        new = r.guarantee_id not in self._groups
        new_lane = self._backlog.new_group
        tp, seq = self._groups.place(r, time.monotonic(), lambda: prio.lane(new_lane(), band))
        if self._journal is None or not record:
            return tp, seq, None
        end = self._backlog.end_bound(tp)
        try:
            return tp, seq, self._journal.record(r, tp, seq, new, end, self._lock, self.flush)
        except BaseException:
            if new:
                self._groups.drop(r.guarantee_id)
            raise

    def _send_segments(
        self,
        view: memoryview,
        r: sendrequest.Request,
        key: bytes | None,
        on: OnDelivery | None,
        band: int = 0,
        ranked: Sequence[tuple[str, bytes]] = (),
    ) -> SendReceipt:
        """`view` in segments (`router.contract.segments.plan`), at most a window unacknowledged."""
        digest = hashlib.sha256(view).hexdigest()
        plan = segments.plan(r, view.nbytes, digest, self._segment_bytes)
        receipt: SendReceipt | None = None
        try:
            for part in plan.parts:
                tp, seq, track = self._place(part.request, band, record=not plan.own)
                headers = [*sendrequest.routing_headers(part.request, seq), *part.headers]
                headers += ranked
                value = view[part.start : part.end].tobytes()  # one segment at a time
                self._out.produce(tp, key, value, headers, on, track)
                self._backlog.sent(tp)
                if receipt is None:
                    seq = None if plan.own else seq
                    receipt = SendReceipt(tp[0], tp[1], seq, plan.count, plan.set_id)
                self._out.wait_below(self._window_bytes)
        except BaseException:
            if plan.own:  # the receiver reports the partial message; forget its group
                self._groups.drop(plan.set_id)
            raise
        self._sync_journal()
        assert receipt is not None
        return receipt

    def _sync_journal(self) -> None:
        if self._journal is not None and self._sync.due():
            with self._lock:
                self._journal.sync()

    def open_groups(self) -> dict[str, OpenGroupInfo]:
        """Each group this sender has open (no final sent yet): its lane, next number and
        age (for a sender with an ID, since it was first opened, across restarts).
        Finish one by sending on (`final=True` last), or `abandon` it."""
        with self._lock:
            return info(self._groups.groups(), self._journal)

    def abandon(self, guarantee_id: str) -> bool:
        """Forget an open group and send nothing more for it (whether it was open). The
        router's entry stays until its TTL, then the sweeper publishes `AbandonedGroup`;
        receivers got the members sent so far, without a final. Reuse the ID only after
        that: a new message under it before is taken for the old group's continuation."""
        with self._lock:
            if self._journal is not None:
                self._journal.abandon(guarantee_id)
        return self._groups.drop(guarantee_id)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every message to be acknowledged; raise DeliveryFailed if any was not."""
        failures = self._out.flush(timeout)
        if failures:
            raise DeliveryFailed(failures)

    def close(self, timeout: float = 30.0) -> None:
        """Flush (DeliveryFailed if Kafka refused messages) and release the clients."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._committed.close()
            self._ends.close()
            if self._tracing is not None:
                self._tracing.spans.shutdown()  # exports what is left (a provider of its own)

    def __del__(self) -> None:
        if "_ends" in self.__dict__:
            self.__dict__.pop("_ends").close()
