"""A background reader of the receive queues while a run goes on: progress, latency, and
knowing when everything arrived (or expired on the way). Never the source of a verdict:
that is the final read (`ops.harness.traffic.collect`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from ops.harness.traffic.collect import expired_id, to_seen
from ops.harness.verdict.records import Seen
from router.config import RouterSettings
from router.contract.priority import band_topic
from router.receiver import Receiver


class Collector:
    """A background reader of all receive queues from the beginning, and of the events
    topic (the messages expired on the way: `accounted`).

    Without priority bands it reads through the router's `Receiver`; with bands, with a
    plain read_committed consumer of every band topic: the `Receiver` hands the highest
    band out first and holds a queue's other bands while a group of one is being handed
    out, and from the beginning of a chaos run's queues it handed out a few hundred of
    22,000 records in a minute (all of band 2), so a progress reader waiting for all of
    them would wait for its deadline. The order it hands out is not what is counted here.
    """

    def __init__(self, settings: RouterSettings, group_id: str) -> None:
        self.settings = settings
        self.group_id = group_id
        self.seen: list[Seen] = []
        self.undecodable = 0
        self.expired: set[str] = set()  # event IDs with an ExpiredMessage event
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def accounted(self) -> int:
        """Records received, and messages expired on the way."""
        with self._lock:
            return len(self.seen) + len(self.expired)

    def _run(self) -> None:
        t = self.settings.topology
        if self.settings.priority.bands > 1:
            self._run_plain()
            return
        receiver = Receiver.from_settings(
            self.settings,
            [*t.receive_queues, t.events_topic],
            group_id=self.group_id,
            assign=True,
            check_lifetimes=False,
        )
        try:
            while not self._stop.is_set():
                m = receiver.poll(0.2)
                if m is None:
                    continue
                self._take(m.topic, m.offset, m.headers, m.value)
        finally:
            receiver.close()

    def _run_plain(self) -> None:
        """Every band topic of every receive queue, and the events topic, as appended."""
        t, bands = self.settings.topology, self.settings.priority.bands
        consumer = Consumer(
            {
                **self.settings.kafka.common(),
                "group.id": self.group_id,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        topics = [band_topic(q, b) for q in t.receive_queues for b in range(bands)]
        consumer.assign([TopicPartition(n, 0, OFFSET_BEGINNING) for n in [*topics, t.events_topic]])
        try:
            while not self._stop.is_set():
                for m in consumer.consume(500, 0.2):
                    if m.error() is None:
                        self._take(m.topic(), m.offset(), m.headers() or [], m.value())
        finally:
            consumer.close()

    def _take(
        self,
        topic: str,
        offset: int,
        headers: Sequence[tuple[str, bytes | None]],
        value: bytes | None,
    ) -> None:
        if topic == self.settings.topology.events_topic:
            gone = expired_id(headers, value)
            if gone is not None:
                with self._lock:
                    self.expired.add(gone)
            return
        seen = to_seen(topic, offset, value)
        with self._lock:
            if seen is None:
                self.undecodable += 1
            else:
                self.seen.append(seen)

    def wait_for(self, expected: int, timeout: float) -> bool:
        """Until `expected` records arrived or expired, or `timeout`; True if they did.
        (Whether anything more arrives is for the final read to say.)"""
        deadline = time.monotonic() + timeout
        while self.accounted() < expected and time.monotonic() < deadline:
            self._stop.wait(0.1)
        return self.accounted() >= expected

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
