"""librdkafka client configuration, built from the settings (never from globals); Redis
clients come from `router.backends.redis.client`."""

from __future__ import annotations

import logging
import os
import queue
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from router.config.settings import KafkaSettings, RouterSettings


class RepeatFilter(logging.Filter):
    """Let the same librdkafka complaint through once per `every` seconds, with a count
    of what was suppressed (a broker away makes every client retry many times a second)."""

    def __init__(self, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every = every
        self._clock = clock
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # The message minus its numbers: "Connect to ipv4#127.0.0.1:9092 failed ..."
        key = re.sub(r"\d+", "#", record.getMessage())
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.every:
            self._seen[key] = (seen[0], seen[1] + 1)
            return False
        suppressed = seen[1] if seen is not None else 0
        if suppressed:
            record.msg = f"{record.msg} [{suppressed} similar lines suppressed]"
        self._seen[key] = (now, 0)
        if len(self._seen) > 1000:
            self._seen.clear()
        return True


# librdkafka's own log lines, routed through Python logging.
LIBRDKAFKA_LOGGER = logging.getLogger("router.librdkafka")
LIBRDKAFKA_LOGGER.addFilter(RepeatFilter())


def instance_id() -> str:
    """This process, as logs and metrics name it."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _merge(kafka: KafkaSettings, tunable: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """Our defaults < the operator's `client_config` < what the guarantees depend on."""
    return {**tunable, **kafka.common(), **fixed, "logger": LIBRDKAFKA_LOGGER}


def consumer_config(
    kafka: KafkaSettings, group_id: str, client_id: str, prefetch_bytes: int = 32 << 20
) -> dict[str, Any]:
    """A unit's consumer: manual offsets (they travel in the transaction), committed reads;
    it prefetches at most about `prefetch_bytes` (plus one fetch).

    `fetch.queue.backoff.ms` 10 (librdkafka's default 1,000): once the prefetch queue holds
    `prefetch_bytes`, librdkafka fetches no partition again for that long. A unit drains
    16 MiB of 1 KB records in well under a second and then sat idle for the rest of it:
    every unit and Python relay stopped near 18,700 msg/s (18.7 MB/s) whatever its batch
    size; with 10 ms the send unit ran at 34,000-40,000 and the raw relay at 45,000-49,000,
    beside the Java relay's 50,000 (`make bench`, docs/explanation/performance.md)."""
    tunable: dict[str, Any] = {
        "queued.max.messages.kbytes": max(prefetch_bytes >> 10, 1024),
        "fetch.queue.backoff.ms": 10,
    }
    fixed: dict[str, Any] = {
        "group.id": group_id,
        "client.id": client_id,
        "group.protocol": kafka.group_protocol,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    }
    if kafka.group_protocol == "classic":
        tunable["session.timeout.ms"] = 10_000
        tunable["heartbeat.interval.ms"] = 1_000
        fixed["partition.assignment.strategy"] = "cooperative-sticky"
    return _merge(kafka, tunable, fixed)


def transactional_producer_config(
    kafka: KafkaSettings, transactional_id: str, client_id: str
) -> dict[str, Any]:
    tunable = {
        "linger.ms": kafka.linger_ms,
        "compression.type": kafka.compression_type,
        # Back-to-back transactions meet CONCURRENT_TRANSACTIONS while the previous one's
        # markers are written; librdkafka's 100 ms default backoff would cap a unit at ~10
        # batches/s (confluent-kafka-python#967, KAFKA-5477: the Java client uses 20 ms).
        "retry.backoff.ms": 10,
    }
    fixed = {
        "client.id": client_id,
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        "acks": "all",
        "transaction.timeout.ms": kafka.transaction_timeout_ms,
        # Dead letters carry a whole record plus metadata: room for twice the limit.
        "message.max.bytes": 2 * kafka.max_message_bytes + 65_536,
    }
    return _merge(kafka, tunable, fixed)


def idempotent_producer_config(kafka: KafkaSettings, client_id: str) -> dict[str, Any]:
    tunable = {"linger.ms": kafka.linger_ms, "compression.type": kafka.compression_type}
    fixed = {"client.id": client_id, "enable.idempotence": True, "acks": "all"}
    return _merge(kafka, tunable, fixed)


def admin_config(kafka: KafkaSettings) -> dict[str, Any]:
    return _merge(kafka, {}, {})


def transactional_id(settings: RouterSettings, role: str) -> str:
    """Unique per process: since KIP-447 the consumer group's generation fences zombies."""
    return f"{settings.topology.name}.{role}.{instance_id()}.{uuid.uuid4().hex[:8]}"


def dispose_in_background(box: list[Any]) -> None:
    """Destroy the Kafka client handles in `box` on a daemon thread.

    Destroying a librdkafka handle joins its threads, and that has been seen to hang for
    good after a broker restart (a lock-order inversion while a request to a vanished
    broker is in flight, librdkafka#5476; #4519). Objects that own clients (the test and
    benchmark harness, the sender library) hand them here when they are done, so that
    such a hang strands a daemon thread instead of the caller. `box` must hold the only
    references (build it as `[obj.__dict__.pop(name)]`): it is emptied on the thread, so
    the last reference, and the destroy, go with it.

    Safe in `__del__`: it only puts the box on a `queue.SimpleQueue` (reentrant). Starting
    a thread there is not: a garbage collection inside `Thread.start` runs the `__del__`
    while the threading module's lock is held, and the new thread never starts (seen as
    a test run stuck for good)."""
    _disposals.put(box)
    if _dispatcher[0] != os.getpid():  # forked: the dispatcher thread stayed behind
        _start_dispatcher()


def _dispatch() -> None:
    while True:
        box = _disposals.get()
        threading.Thread(target=box.clear, name="kafka-client-dispose", daemon=True).start()
        del box


def _start_dispatcher() -> None:
    _dispatcher[0] = os.getpid()
    threading.Thread(target=_dispatch, name="kafka-client-dispatch", daemon=True).start()


_disposals: queue.SimpleQueue[list[Any]] = queue.SimpleQueue()
_dispatcher = [0]  # the pid the dispatcher thread runs in
_start_dispatcher()
