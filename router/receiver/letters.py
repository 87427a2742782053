"""The receiver library's dead letters, GroupStopped and ExpiredMessage events (Kafka I/O).

The same records the units write (`router.contract.events`, docs/reference/events.md), with side
`RECEIVER`: the original key, value and headers, the receive-queue position, and the
reason. The receiver is no transaction, so the order makes them safe: they are produced
through an idempotent producer (`acks=all`) and **flushed** before the receiver stores the
offset that moves past the message; a receiver that dies in between reads the message
again (`router.receiver.redelivery_rules` then skips it if its dead letter was recorded as written,
else writes it again: at least once). The producer is made on the first dead letter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from router.backends.kafka.clients import dispose_in_background
from router.backends.kafka.fatal import fatal_unmasked, is_fatal
from router.config import client as clientconfig
from router.contract import events, schemas
from router.contract.headers import BadInput
from router.errors import RouterError
from router.receiver.received import Received

log = logging.getLogger("router.receiver")

FLUSH_TIMEOUT_S = 30.0


class DeadLetterFailed(RouterError, RuntimeError):
    """A dead letter (or event) the receiver wrote was not acknowledged by Kafka: the
    message was not committed past, and comes again."""


def max_deliveries_reason(m: Received, failed: int) -> BadInput:
    bad = BadInput("max-deliveries", f"delivered {failed} times, never completed")
    return _of(bad, m)


def group_stopped_reason(m: Received, stop_offset: int) -> BadInput:
    bad = BadInput(
        "group-stopped",
        f"group {m.guarantee_id!r} stopped at {m.topic}[{m.partition}]@{stop_offset} "
        "(max-deliveries under stop-group, or an expired member under expire-group: "
        "see its GroupStopped event)",
    )
    return _of(bad, m)


def _of(bad: BadInput, m: Received) -> BadInput:
    bad.guarantee_id, bad.seq, bad.final = m.guarantee_id, m.seq, m.final
    return bad


class ReceiverLetters:
    """Writes the receiver's dead letters to `dead_letter_topic` and its events to
    `events_topic`; `flush()` raises DeadLetterFailed unless Kafka acknowledged all."""

    def __init__(
        self,
        config: Mapping[str, Any],
        client_id: str,
        *,
        dead_letter_topic: str | None,
        events_topic: str | None,
        topology: str,
        max_value_bytes: int,
    ) -> None:
        self._config = clientconfig.producer_config(
            {**clientconfig.connection_config(config), "linger.ms": 0}, f"{client_id}-dlq"
        )
        self.unit = client_id
        self.dead_letter_topic, self.events_topic = dead_letter_topic, events_topic
        self.topology = topology
        self.max_value_bytes = max_value_bytes
        self._producer: Producer | None = None
        self._errors: list[str] = []

    def _produce(self, topic: str, key: bytes | None, value: bytes, headers: Any) -> None:
        if self._producer is None:
            self._producer = Producer(self._config)
        try:
            with fatal_unmasked():
                self._producer.produce(
                    topic, value, key, headers=headers, on_delivery=self._delivered
                )
                self._producer.poll(0)
        except KafkaException as exc:
            if not is_fatal(exc):
                raise
            self._errors.clear()  # this unit of work fails now, and comes again whole
            raise DeadLetterFailed(f"dead letters not written: {self._let_go(exc)}") from None

    def _let_go(self, exc: KafkaException) -> str:
        """A producer that failed fatally (an idempotent producer's sequence lost, say) is
        let go: the next letter gets a new one. What it held was not acknowledged, so the
        messages are not committed past and come again. Why, for the error."""
        why = f"the producer failed fatally ({exc}); a new one is made for the next letter"
        log.warning("%s", why)
        old, self._producer = [self._producer], None
        dispose_in_background(old)
        return why

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def dead_letter(self, m: Received, bad: BadInput) -> None:
        """Queue `m`'s dead letter with reason `bad` (sent by the next `flush`)."""
        if self.dead_letter_topic is None:
            raise DeadLetterFailed(
                f"no dead-letter topic for {m.topic}: give the topology's name, or "
                "RedeliveryOptions(dead_letter_topic=...)"
            )
        record = events.dead_letter(
            bad,
            side="receiver",
            unit=self.unit,
            topic=m.topic,
            partition=m.partition,
            offset=m.offset,
            timestamp_ms=m.timestamp_ms,
            key=m.key,
            value=m.value,
            headers=m.headers,
            now_ms=int(time.time() * 1000),
            max_value_bytes=self.max_value_bytes,
        )
        headers = [
            (schemas.SCHEMA_HEADER, events.DEAD_LETTER.encode()),
            ("reason", bad.code.encode()),
        ]
        log.warning("dead-lettered %s[%d]@%d: %s", m.topic, m.partition, m.offset, bad)
        self._produce(self.dead_letter_topic, m.key, record, headers)

    def group_stopped(self, m: Received, bad: BadInput) -> None:
        """Queue the GroupStopped event of `m`'s group (stopped at `m`)."""
        gid = m.guarantee_id or ""
        log.error("stopping group %r at %s[%d]@%d: %s", gid, m.topic, m.partition, m.offset, bad)
        if self.events_topic is None:
            return  # the dead letters still say it; no events topic is known
        record = events.group_stopped(
            gid,
            bad,
            side="receiver",
            topology=self.topology,
            unit=self.unit,
            topic=m.topic,
            partition=m.partition,
            offset=m.offset,
            now_ms=int(time.time() * 1000),
        )
        headers = [(schemas.SCHEMA_HEADER, events.GROUP_STOPPED.encode())]
        self._produce(self.events_topic, gid.encode(), record, headers)

    def expired(self, m: Received, bad: BadInput, expires_ms: int, on_expiry: str | None) -> None:
        """Queue `m`'s ExpiredMessage event (hop RECEIVER; sent by the next `flush`)."""
        if self.events_topic is None:
            raise DeadLetterFailed(f"no events topic for {m.topic}: its expiry cannot be told")
        record = events.expired_message(
            bad,
            hop="receiver",
            topology=self.topology,
            unit=self.unit,
            topic=m.topic,
            partition=m.partition,
            offset=m.offset,
            timestamp_ms=m.timestamp_ms,
            expires_ms=expires_ms,
            on_expiry=on_expiry,
            key=m.key,
            value=m.value,
            headers=m.headers,
            now_ms=int(time.time() * 1000),
        )
        headers = [(schemas.SCHEMA_HEADER, events.EXPIRED_MESSAGE.encode())]
        key = m.guarantee_id.encode() if m.guarantee_id else m.key
        log.warning("expired %s[%d]@%d: %s", m.topic, m.partition, m.offset, bad.detail)
        self._produce(self.events_topic, key, record, headers)

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> None:
        """Wait until Kafka acknowledged everything queued; DeadLetterFailed otherwise."""
        left = 0
        if self._producer is not None:
            try:
                with fatal_unmasked():
                    left = self._producer.flush(timeout)
            except KafkaException as exc:
                if not is_fatal(exc):
                    raise
                self._errors.append(self._let_go(exc))
        errors, self._errors = self._errors, []
        if left or errors:
            what = "; ".join(errors[:3]) or f"{left} not acknowledged within {timeout}s"
            raise DeadLetterFailed(f"dead letters not written: {what}")
