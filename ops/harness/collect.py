"""Read every receive queue (read_committed) and turn what arrived into `Seen` records."""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import Consumer, TopicPartition

from ops.harness.verify import Seen
from ops.harness.workload import ORDER_EVENT
from router import schemas
from router.config import RouterSettings
from router.receiver import Receiver

log = logging.getLogger("router.collect")


def to_seen(queue: str, offset: int, payload: bytes | None) -> Seen | None:
    if payload is None:
        return None
    try:
        event = schemas.decode(ORDER_EVENT, payload)
    except Exception:
        return None
    latency = time.time() * 1000 - event["created_at"].timestamp() * 1000
    return Seen(
        queue,
        offset,
        event["event_id"],
        event["order_id"],
        event["line_no"],
        event["last_line"],
        latency,
    )


class Collector:
    """A background reader of all receive queues from the beginning."""

    def __init__(self, settings: RouterSettings, group_id: str) -> None:
        self.settings = settings
        self.group_id = group_id
        self.seen: list[Seen] = []
        self.undecodable = 0
        self.last_arrival = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def _run(self) -> None:
        receiver = Receiver(self.settings, group_id=self.group_id, assign=True)
        try:
            while not self._stop.is_set():
                m = receiver.poll(0.2)
                if m is None:
                    continue
                seen = to_seen(m.topic, m.offset, m.value)
                with self._lock:
                    if seen is None:
                        self.undecodable += 1
                    else:
                        self.seen.append(seen)
                    self.last_arrival = time.monotonic()
        finally:
            receiver.close()

    def wait_for(self, expected: int, timeout: float, quiet: float = 2.0) -> bool:
        """Until `expected` records arrived and nothing more came for `quiet` s (so that
        duplicates would show), or `timeout`. True if `expected` arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                n, last = len(self.seen), self.last_arrival
            if n >= expected and time.monotonic() - last >= quiet:
                return True
            self._stop.wait(0.1)
        return self.count() >= expected

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def read_queues(settings: RouterSettings, timeout: float = 120.0) -> tuple[list[Seen], int]:
    """Read every receive queue from its beginning to its end with read_committed, in a
    fresh consumer: (what is there, undecodable records). Call when nothing writes any more
    (the end is the high watermark, which committed transactions' markers reach)."""
    consumer = Consumer(
        {
            **settings.kafka.common(),
            "group.id": f"{settings.topology.name}.final-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    ends: dict[str, int] = {}
    for queue in settings.topology.receive_queues:
        low, high = consumer.get_watermark_offsets(TopicPartition(queue, 0), timeout=30)
        if high > low:
            ends[queue] = high
    consumer.assign([TopicPartition(q, 0, 0) for q in ends])
    seen: list[Seen] = []
    undecodable = 0
    done: set[str] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"receive queues not read to the end: {set(ends) - done}")
            for m in consumer.consume(1000, 0.5):
                if m.error() is not None:
                    continue  # end-of-partition events; position is checked below
                record = to_seen(m.topic(), m.offset(), m.value())
                if record is None:
                    undecodable += 1
                else:
                    seen.append(record)
            for tp in consumer.position([TopicPartition(q, 0) for q in ends if q not in done]):
                if tp.offset >= ends[tp.topic]:
                    done.add(tp.topic)
    finally:
        consumer.close()
    return seen, undecodable
