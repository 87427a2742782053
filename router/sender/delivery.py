"""The `Sender`'s producer and what Kafka acknowledged: counts, failures, bytes in flight.

Every record goes out through `Deliveries.produce`; its acknowledgement (served by the
producer's `poll`/`flush`, in the sending thread) counts it delivered, records a group
member's place in the sender's journal, or keeps the failure for `flush` to report. The
bytes produced and not yet acknowledged bound a segmented message's window
(`wait_below`), so a large payload is never copied whole into the producer's queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from router.sender.journal import Journal

TP = tuple[str, int]
OnDelivery = Callable[[Any, Any], None]
Track = tuple[str, str, int, bool]  # a member's group, its opening's token, seq, final


class Deliveries:
    """A producer's sent and acknowledged records (the lock is the Sender's)."""

    def __init__(self, producer: Producer, lock: threading.Lock) -> None:
        self.producer = producer
        self.lock = lock
        self.journal: Journal | None = None
        self.sent = 0
        self.delivered = 0
        self.in_flight = 0  # bytes of values produced and not yet acknowledged
        self.failures: list[str] = []

    def produce(
        self,
        tp: TP,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]],
        on_delivery: OnDelivery | None,
        track: Track | None = None,
    ) -> None:
        """Produce one record to partition `tp`; a full local queue is served and retried."""
        size = len(value) if value else 0

        def delivered(err: Any, msg: Any) -> None:
            with self.lock:
                self.in_flight -= size
                if err is None:
                    self.delivered += 1
                    if track is not None and self.journal is not None:
                        where = (msg.topic(), msg.partition())
                        self.journal.delivered(*track[:3], where, msg.offset(), track[3])
                else:
                    self.failures.append(f"{tp[0]}[{tp[1]}]: {err}")
            if on_delivery is not None:
                on_delivery(err, msg)

        while True:
            try:
                self.producer.produce(
                    tp[0], value, key, partition=tp[1], headers=headers, on_delivery=delivered
                )
                break
            except BufferError:
                self.producer.poll(0.05)  # local queue full: serve deliveries, then retry
        with self.lock:
            self.in_flight += size
        self.sent += 1
        self.producer.poll(0)

    def wait_below(self, limit: int) -> None:
        """Serve acknowledgements until at most `limit` bytes are unacknowledged (a
        failed delivery counts as acknowledged: `flush` reports it)."""
        while self.in_flight > limit:
            self.producer.poll(0.05)

    def flush(self, timeout: float) -> list[str]:
        """Wait for every acknowledgement; the failures since the last flush."""
        remaining = self.producer.flush(timeout)
        with self.lock:
            failures, self.failures = self.failures, []
            if self.journal is not None:
                self.journal.sync()
        if remaining:
            failures.append(f"{remaining} messages still unacknowledged after {timeout}s")
        return failures
