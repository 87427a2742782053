"""The sender library: put messages on the send queues, groups on one partition in order.

As the patent's sender does, a new group or an ordinary message goes to the send-queue
partition with the least backlog (messages not yet consumed by the send units); every
later message of the group goes to the same partition, so the group keeps its order.
Backlogs within `sticky_slack` messages of the least count as equal, and among equals a
new group goes where this sender's previous group went: one sender's consecutive groups
then sit in one partition and are consumed in the order sent, instead of being opened
at once from several partitions consumed at different paces (which would make them hold
several destinations at the same time). The producer is idempotent (no duplicates or
reordering on retries). Delivery failures are never silent: `flush()` raises
`DeliveryFailed` listing them.

Backlog = high watermark - the send units' committed offset, read with one admin request
per refresh (every `backlog_refresh_s`), plus what this sender produced since.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from router import clients, contract
from router.clock import Every
from router.config import RouterSettings
from router.offsets import CommittedOffsets

log = logging.getLogger("router.sender")

TP = tuple[str, int]


class DeliveryFailed(Exception):
    """Messages Kafka did not acknowledge; they were not sent."""

    def __init__(self, failures: Sequence[str]) -> None:
        super().__init__(f"{len(failures)} messages not delivered: {'; '.join(failures[:5])}")
        self.failures = list(failures)


@dataclass
class _OpenGroup:
    tp: TP
    next_seq: int
    last_used: float


@dataclass(frozen=True, slots=True)
class SendReceipt:
    topic: str
    partition: int
    seq: int | None  # the message's sequence number in its group


class Sender:
    def __init__(
        self,
        settings: RouterSettings,
        *,
        client_id: str | None = None,
        backlog_refresh_s: float = 1.0,
        sticky_slack: int = 100,
        producer_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        cid = client_id or f"sender-{clients.instance_id()}"
        config = clients.idempotent_producer_config(settings.kafka, cid)
        config.update(producer_overrides or {})
        self._producer = Producer(config)
        self._admin = AdminClient(clients.admin_config(settings.kafka))
        # An estimate that must never block a send on a pending transaction.
        self._committed = CommittedOffsets(settings.kafka, cid, stable=False)
        self._queues = list(settings.topology.send_queues)
        self._partitions = self._discover()
        self._backlog: dict[TP, int] = dict.fromkeys(self._partitions, 0)
        self._refresh = Every(backlog_refresh_s)
        self._slack = sticky_slack
        self._last_group_tp: TP | None = None
        self._open: dict[str, _OpenGroup] = {}
        self._max_idle = (
            max([settings.routing.default_ttl_ms, *settings.routing.ttl_by_type.values()]) / 1000
        )
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self.sent = 0
        self.delivered = 0

    def _discover(self) -> list[TP]:
        meta = self._admin.list_topics(timeout=30).topics
        missing = [q for q in self._queues if q not in meta]
        if missing:
            raise RuntimeError(
                f"send queues {missing} do not exist (run `router topics create` first)"
            )
        return [(q, p) for q in self._queues for p in sorted(meta[q].partitions)]

    # ------------------------------------------------------------------ backlog

    def backlog(self) -> dict[TP, int]:
        """Estimated unconsumed messages per send-queue partition."""
        if self._refresh.due():
            try:
                self._backlog = self._measure()
            except (KafkaException, TimeoutError) as exc:
                log.warning("could not refresh send-queue backlog, keeping estimates: %s", exc)
        return self._backlog

    def _measure(self) -> dict[TP, int]:
        tps = [TopicPartition(t, p) for t, p in self._partitions]
        latest = self._admin.list_offsets({tp: OffsetSpec.latest() for tp in tps})
        ends = {(tp.topic, tp.partition): f.result(timeout=10).offset for tp, f in latest.items()}
        done = self._committed.read(self.settings.topology.send_group, tps, timeout=10)
        return {tp: max(ends[tp] - done.get(tp, 0), 0) for tp in self._partitions}

    def _least_backlog(self, sticky: bool = False) -> TP:
        backlog = self.backlog()
        best = min(self._partitions, key=lambda tp: (backlog.get(tp, 0), tp))
        last = self._last_group_tp
        if sticky and last is not None and backlog.get(last, 0) <= backlog[best] + self._slack:
            return last
        return best

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
        headers: Sequence[tuple[str, bytes]] = (),
        on_delivery: Callable[[Any, Any], None] | None = None,
        delivery: Literal["stream", "complete"] | None = None,
    ) -> SendReceipt:
        """Send one message; a group's messages go to one partition in the order sent.
        `delivery="complete"` on a group's first message asks for whole-group delivery
        (docs/routing.md); None leaves it to the router's configuration."""
        now = time.monotonic()
        seq: int | None = None
        if guarantee_id is None:
            if final:
                raise ValueError("an ordinary message (no guarantee ID) cannot be final")
            tp = self._least_backlog()
        else:
            group = self._open.get(guarantee_id)
            if group is None:
                tp = self._least_backlog(sticky=True)
                self._last_group_tp = tp
                group = self._open[guarantee_id] = _OpenGroup(tp, 0, now)
            tp, seq = group.tp, group.next_seq
            group.next_seq += 1
            group.last_used = now
            if final:
                del self._open[guarantee_id]
        routing = contract.headers_for(
            guarantee_id,
            final=final,
            seq=seq,
            message_type=message_type,
            ttl_ms=ttl_ms,
            delivery=delivery if guarantee_id is not None else None,
        )
        self._produce(tp, key, value, [*routing, *headers], on_delivery)
        self._backlog[tp] = self._backlog.get(tp, 0) + 1
        if len(self._open) > 10_000:
            self._forget_idle(now)
        return SendReceipt(tp[0], tp[1], seq)

    def _produce(
        self,
        tp: TP,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        on_delivery: Callable[[Any, Any], None] | None,
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

    def _forget_idle(self, now: float) -> None:
        """Groups a sender never finished stop pinning a partition after the longest TTL."""
        idle = [g for g, o in self._open.items() if now - o.last_used > self._max_idle]
        for g in idle:
            del self._open[g]

    def open_groups(self) -> dict[str, TP]:
        return {g: o.tp for g, o in self._open.items()}

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
        try:
            self.flush(timeout)
        finally:
            self._committed.close()

    def __del__(self) -> None:
        if "_admin" in self.__dict__:
            clients.dispose_in_background([self.__dict__.pop("_admin")])
