"""The sender library: put messages on the send queues, groups on one partition in order.

As the patent's sender does, a new group or an ordinary message goes to the send-queue
partition with the least backlog (messages not yet consumed by the send units, see
`router.backlog`); every later message of the group goes to the same partition, numbered
(`guarantee-seq`), so the group keeps its order. The producer is idempotent (no
duplicates or reordering on retries). Delivery failures are never silent: `flush()`
raises `DeliveryFailed` listing them. Configuration: `router.clientconfig`; what a
caller's own routing headers may say: `router.sendgroups`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from router import clientconfig, clients, sendgroups
from router.backlog import Backlog
from router.config import RouterSettings, RoutingSettings
from router.offsets import CommittedOffsets

log = logging.getLogger("router.sender")

TP = tuple[str, int]
OnDelivery = Callable[[Any, Any], None]


class DeliveryFailed(Exception):
    """Messages Kafka did not acknowledge; they were not sent."""

    def __init__(self, failures: Sequence[str]) -> None:
        super().__init__(f"{len(failures)} messages not delivered: {'; '.join(failures[:5])}")
        self.failures = list(failures)


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """Where `Sender.send` put a message: its send-queue partition and its number in its
    group (None for an ordinary message)."""

    topic: str
    partition: int
    seq: int | None


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
    ) -> None:
        """`config`: librdkafka properties, as for `confluent_kafka.Producer`
        (`bootstrap.servers`, security, `linger.ms`, ...; idempotence and `acks=all` are
        required, see `router.clientconfig`). `topology`: the topology's name, whose send
        queues `<name>.send.<n>` and send units' group `<name>.send-units` are used; or
        name them with `send_queues` and `units_group` (the backlog of each partition is
        measured against that group's committed offsets).

        `group_idle_s`: a group with no message for this long is forgotten (give the
        router's longest TTL). `default_order`: the router's `routing.default_order`,
        which says how a caller's own `guarantee-seq` header is checked. Backlogs are
        measured every `backlog_refresh_s`; within `sticky_slack` messages of the least,
        a new group goes where this sender's previous group went."""
        if send_queues is None and topology is None:
            raise ValueError("give the topology's name, or its send_queues")
        group = units_group or (clientconfig.units_group(topology) if topology else None)
        if group is None:
            raise ValueError("with send_queues, give units_group: the send units' consumer group")
        cid = str(config.get("client.id") or f"sender-{clients.instance_id()}")
        settings = {"logger": clients.LIBRDKAFKA_LOGGER, **config}
        self._producer = Producer(clientconfig.producer_config(settings, cid))
        connection = clientconfig.connection_config(settings)
        self._admin = AdminClient(connection)
        # An estimate that must never block a send on a pending transaction.
        self._committed = CommittedOffsets(connection, cid, stable=False)
        queues, partitions = self._discover(send_queues, topology)
        self._queues = queues
        self._backlog = Backlog(
            self._admin,
            self._committed,
            group,
            partitions,
            refresh_s=backlog_refresh_s,
            slack=sticky_slack,
        )
        self._groups = sendgroups.OpenGroups(group_idle_s)
        self._default_order = default_order
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self._closed = False
        self.sent = 0
        self.delivered = 0

    @classmethod
    def from_settings(
        cls,
        settings: RouterSettings,
        *,
        client_id: str | None = None,
        backlog_refresh_s: float = 1.0,
        sticky_slack: int = 100,
        producer_overrides: Mapping[str, Any] | None = None,
    ) -> Sender:
        """A sender for the topology, Kafka settings and TTLs of the router's settings
        (`producer_overrides`: librdkafka properties on top of `kafka.client_config`)."""
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
        )

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

    def _discover(
        self, queues: Sequence[str] | None, topology: str | None
    ) -> tuple[list[str], list[TP]]:
        meta = self._admin.list_topics(timeout=30).topics
        if not queues:
            queues = clientconfig.topology_queues(str(topology), "send", meta)
            if not queues:
                raise RuntimeError(
                    f"topology {topology!r} has no send queues {topology}.send.<n> "
                    "(run `router topics create` first, or give send_queues)"
                )
        missing = [q for q in queues if q not in meta]
        if missing:
            raise RuntimeError(
                f"send queues {missing} do not exist (run `router topics create` first)"
            )
        return list(queues), [(q, p) for q in queues for p in sorted(meta[q].partitions)]

    # ------------------------------------------------------------------ backlog

    def backlog(self) -> dict[TP, int]:
        """Estimated unconsumed messages per send-queue partition."""
        return self._backlog.current()

    # ------------------------------------------------------------------ sending

    def send(
        self,
        value: bytes | None,
        *,
        guarantee_id: str | None = None,
        final: bool = False,
        key: bytes | None = None,
        message_type: str | None = None,
        ttl_ms: int | None = None,
        headers: Sequence[tuple[str, str | bytes | None]] = (),
        on_delivery: OnDelivery | None = None,
        delivery: Literal["stream", "complete"] | None = None,
    ) -> SendReceipt:
        """Send one message; a group's messages go to one partition, numbered, in the
        order sent. Asynchronous, like `Producer.produce`: `flush()` (or leaving the
        `with` block) waits for Kafka's acknowledgements; `on_delivery(err, msg)` is
        called with each.

        `guarantee_id` makes it a member of that group, `final` its last message.
        `delivery="complete"` on a group's first message asks for whole-group delivery
        (docs/routing.md); None leaves it to the router's configuration. `headers` may
        carry routing headers too (`guarantee-id`, `guarantee-seq`, ...: see
        `router.sendgroups`); they are checked, and ValueError says what is wrong with one
        (a `guarantee-seq` that is not the group's next number, a header given twice)
        before anything is sent."""
        r = sendgroups.request(
            headers,
            guarantee_id=guarantee_id,
            final=final,
            message_type=message_type,
            ttl_ms=ttl_ms,
            delivery=delivery,
            default_order=self._default_order,
        )
        seq: int | None = None
        if r.guarantee_id is None:
            tp = self._backlog.least()
        else:
            tp, seq = self._groups.place(r, time.monotonic(), self._backlog.new_group)
        routing = sendgroups.routing_headers(r, seq)
        self._produce(tp, key, value, [*routing, *r.others], on_delivery)
        self._backlog.sent(tp)
        return SendReceipt(tp[0], tp[1], seq)

    def _produce(
        self,
        tp: TP,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]],
        on_delivery: OnDelivery | None,
    ) -> None:
        def delivered(err: Any, msg: Any) -> None:
            with self._lock:
                if err is None:
                    self.delivered += 1
                else:
                    self._failures.append(f"{tp[0]}[{tp[1]}]: {err}")
            if on_delivery is not None:
                on_delivery(err, msg)

        while True:
            try:
                self._producer.produce(
                    tp[0], value, key, partition=tp[1], headers=headers, on_delivery=delivered
                )
                break
            except BufferError:
                self._producer.poll(0.05)  # local queue full: serve deliveries, then retry
        self.sent += 1
        self._producer.poll(0)

    def open_groups(self) -> dict[str, TP]:
        """Each group this sender has open (no final sent yet) and its partition."""
        return self._groups.lanes()

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every message to be acknowledged; raise DeliveryFailed if any was not."""
        remaining = self._producer.flush(timeout)
        with self._lock:
            failures, self._failures = self._failures, []
        if remaining:
            failures.append(f"{remaining} messages still unacknowledged after {timeout}s")
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

    def __del__(self) -> None:
        if "_admin" in self.__dict__:
            clients.dispose_in_background([self.__dict__.pop("_admin")])
