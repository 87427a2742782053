"""The receiver library: read receive queues with `read_committed`, commit after processing.

`receive(timeout)` returns the next message or raises `ReceiveTimeout`; `done(message)`
marks it processed. Only processed messages' offsets are committed (stored offsets,
committed every second and on close), so a receiver that crashes reprocesses what it had
not finished, never skips it. `process(handler)` is the loop: receive, handle, done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from router import clients, contract
from router.config import RouterSettings

log = logging.getLogger("router.receiver")


class ReceiveTimeout(TimeoutError):
    """No message arrived within the wait time."""


@dataclass(frozen=True, slots=True)
class Received:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int | None
    guarantee_id: str | None
    final: bool
    seq: int | None

    @property
    def grouped(self) -> bool:
        return self.guarantee_id is not None


def _routing(headers: list[tuple[str, bytes | None]]) -> tuple[str | None, bool, int | None]:
    """The routing headers, read leniently (the router validated them already)."""
    gid: str | None = None
    final = False
    seq: int | None = None
    for k, v in headers:
        if v is None:
            continue
        if k == contract.GUARANTEE_ID:
            gid = v.decode("utf-8", "replace")
        elif k == contract.FINAL:
            final = v in (b"true", b"1", b"True", b"TRUE")
        elif k == contract.SEQ and v.isdigit():
            seq = int(v)
    return gid, final, seq


class Receiver:
    def __init__(
        self,
        settings: RouterSettings,
        queues: Sequence[str] | None = None,
        *,
        group_id: str,
        client_id: str | None = None,
        assign: bool = False,
    ) -> None:
        """Read `queues` (default: every receive queue of the topology) as consumer group
        `group_id`. `assign=True` reads every partition from the committed offset without
        joining a group (a checker reading all queues)."""
        self.queues = list(queues or settings.topology.receive_queues)
        config: dict[str, Any] = {
            **settings.kafka.common(),
            "group.id": group_id,
            "client.id": client_id or f"receiver-{clients.instance_id()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "auto.commit.interval.ms": 1000,
            "auto.offset.reset": "earliest",
            "logger": clients.LIBRDKAFKA_LOGGER,
        }
        self._consumer = Consumer(config)
        if assign:
            meta = self._consumer.list_topics(timeout=30).topics
            self._consumer.assign(
                [TopicPartition(q, p) for q in self.queues for p in meta[q].partitions]
            )
        else:
            self._consumer.subscribe(self.queues)
        self.received = 0

    def poll(self, timeout: float) -> Received | None:
        """The next message, or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            m = self._consumer.poll(max(deadline - time.monotonic(), 0))
            if m is None:
                return None
            err = m.error()
            if err is None:
                break
            if err.fatal():
                raise KafkaException(err)
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", err)
            if time.monotonic() >= deadline:
                return None
        try:
            headers = contract.read_headers(m) or []
        except contract.BadInput as bad:
            log.warning(
                "%s[%d]@%d: %s; delivered without headers",
                m.topic(),
                m.partition(),
                m.offset(),
                bad,
            )
            headers = []
        gid, final, seq = _routing(headers)
        ts_type, ts = m.timestamp()
        self.received += 1
        return Received(
            m.topic(),
            m.partition(),
            m.offset(),
            m.key(),
            m.value(),
            headers,
            ts if ts_type else None,
            gid,
            final,
            seq,
        )

    def receive(self, timeout: float) -> Received:
        """The next message; raises ReceiveTimeout if none arrives within `timeout` s."""
        message = self.poll(timeout)
        if message is None:
            raise ReceiveTimeout(f"no message on {', '.join(self.queues)} within {timeout}s")
        return message

    def done(self, message: Received) -> None:
        """Mark a message processed: its offset will be committed."""
        self._consumer.store_offsets(
            offsets=[TopicPartition(message.topic, message.partition, message.offset + 1)]
        )

    def commit(self) -> None:
        """Commit what has been marked done, now (synchronously)."""
        try:
            self._consumer.commit(asynchronous=False)
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
        never), `max_messages` were handled, or `stop()` is true. Returns the count."""
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
            handler(message)
            self.done(message)
            handled += 1
        return handled

    def close(self) -> None:
        self.commit()
        self._consumer.close()
