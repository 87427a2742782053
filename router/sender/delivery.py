"""The `Sender`'s producer and what Kafka acknowledged: counts, failures, bytes in flight.

Every record goes out through `Deliveries.produce`; its acknowledgement (served by the
producer's `poll`/`flush`, in the sending thread) counts it delivered, records a group
member's place in the sender's journal, or keeps the failure for `flush` to report. The
bytes produced and not yet acknowledged bound a segmented message's window
(`wait_below`), so a large payload is never copied whole into the producer's queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from router.backends.kafka.brokerwatch import NoBrokerWatch
from router.backends.kafka.clients import dispose_in_background
from router.backends.kafka.fatal import fatal_unmasked, reraise
from router.sender.journal import Journal

log = logging.getLogger("router.sender")

TP = tuple[str, int]
OnDelivery = Callable[[Any, Any], None]
Track = tuple[str, str, int, bool]  # a member's group, its opening's token, seq, final


class Deliveries:
    """A producer's sent and acknowledged records (the lock is the Sender's)."""

    def __init__(
        self,
        new_producer: Callable[[], Producer],
        lock: threading.Lock,
        watch: NoBrokerWatch | None = None,
    ) -> None:
        self._new_producer = new_producer
        self.watch = watch if watch is not None else NoBrokerWatch(0)
        self.producer = new_producer()
        self.replaced = 0  # producers replaced for having no broker
        self._failing: str | None = None  # why the messages being purged fail
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
                elif self._failing is not None:
                    self.failures.append(f"{tp[0]}[{tp[1]}]: {self._failing} ({err})")
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
                with fatal_unmasked():
                    self.producer.poll(0.05)  # local queue full: serve deliveries, then retry
                self.check()
        with self.lock:
            self.in_flight += size
        self.sent += 1
        try:
            self.producer.poll(0)
        except SystemError as exc:
            reraise(exc)
        self.check()

    def wait_below(self, limit: int) -> None:
        """Serve acknowledgements until at most `limit` bytes are unacknowledged (a
        failed delivery counts as acknowledged: `flush` reports it)."""
        while self.in_flight > limit:
            with fatal_unmasked():
                self.producer.poll(0.05)
            self.check()

    def check(self) -> bool:
        """Replace the producer if it has had no broker for the watch's time: what it
        holds fails (purged), a new one takes over. Whether it did."""
        gone = self.watch.stuck()
        if gone is None:
            return False
        why = f"the producer had no broker for {gone:.0f} s (librdkafka#5301) and was replaced"
        old = self.producer
        before = len(self.failures)
        self._failing = why
        try:
            old.purge(True, True, False)  # in the queue, in flight; don't block
            with fatal_unmasked():
                left = old.flush(1.0)  # serves the purged messages' delivery reports
        finally:
            self._failing = None
        with self.lock:
            if left:  # never reported: count them failed, and out of the window
                self.failures.append(f"{left} messages never reported: {why}")
                self.in_flight = 0
            failed = len(self.failures) - before + left
        log.warning("%s: %d messages it held failed", why, failed)
        self.producer = self._new_producer()
        self.watch.reset()
        self.replaced += 1
        box = [old]
        del old
        dispose_in_background(box)
        return True

    def flush(self, timeout: float) -> list[str]:
        """Wait for every acknowledgement; the failures since the last flush."""
        deadline = time.monotonic() + timeout
        while True:  # in slices: a producer left with no broker is replaced meanwhile
            left = max(deadline - time.monotonic(), 0.0)
            with fatal_unmasked():
                remaining = self.producer.flush(min(left, 1.0))
            if remaining == 0 or (not self.check() and left <= 1.0):
                break
        with self.lock:
            failures, self.failures = self.failures, []
            if self.journal is not None:
                self.journal.sync()
        if remaining:
            failures.append(f"{remaining} messages still unacknowledged after {timeout}s")
        return failures
