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

import logging
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from router.backends.kafka import clients
from router.backends.kafka.brokerwatch import NoBrokerWatch, watched
from router.backends.kafka.endoffsets import EndOffsets
from router.backends.kafka.offsets import CommittedOffsets
from router.backends.redis.client import redis_client
from router.config import client as clientconfig
from router.config.settings import RouterSettings, RoutingSettings, TracingSettings
from router.contract import priority as prio
from router.contract import segments
from router.errors import ConfigError
from router.sender import groups as sendgroups
from router.sender.backlog import REQUEST_TIMEOUT_S, Backlog
from router.sender.delivery import TP, Deliveries
from router.sender.groups import DeliveryFailed, SendReceipt
from router.sender.journal import Journal, OpenGroupInfo
from router.sender.sending import Sending
from router.sender.traced import SendSpans
from router.state.store import SenderFenced, SenderStore, State
from router.tracing import setup as tracing_setup
from router.utils.clock import Every

__all__ = ["DeliveryFailed", "OpenGroupInfo", "SendReceipt", "Sender", "SenderFenced"]

log = logging.getLogger("router.sender")


class Sender(Sending):
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
        no_broker_replace_s: float = 30.0,
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
        `traceparent` header (`router.sender.traced`, docs/how-to/tracing.md).

        `no_broker_replace_s`: a producer whose statistics name no broker for this long
        (librdkafka#5301: it never recovers) is replaced, and the messages it held fail
        (`flush` raises DeliveryFailed naming the reason); 0: never
        (`router.sender.delivery`)."""
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
        watch = NoBrokerWatch(no_broker_replace_s)
        producer_config = watched(clientconfig.producer_config(settings, cid), watch)
        self._out = Deliveries(lambda: Producer(producer_config), self._lock, watch)
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
        self._journal = None
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
            no_broker_replace_s=settings.kafka.no_broker_replace_s,
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
