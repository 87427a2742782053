"""The benchmark's load: which group each message belongs to, incompressible payloads,
filling a topic beforehand, and the paced load generator of the latency runs."""

from __future__ import annotations

import random
import struct
import time
import zlib
from typing import Any

from confluent_kafka import Producer

from ops.harness.benchmark.model import MEAN_GROUP_LENGTH, SOURCE_PARTITIONS, Workload
from router import contract
from router.backends.kafka import clients
from router.config import RouterSettings
from router.tracing.context import SAMPLED, TRACEPARENT, format_traceparent


class GroupModel:
    """Which group each message belongs to: `open_groups` slots, each holding one open
    group at a time (a new one as soon as the last ended), group lengths around
    MEAN_GROUP_LENGTH; `grouped` of the messages belong to a group, the rest are
    ordinary. Deterministic for a seed."""

    def __init__(self, w: Workload, seed: int, prefix: str) -> None:
        self.w = w
        self.rng = random.Random(seed)
        self.prefix = prefix
        self.counter = 0
        self.slots: list[list[Any]] = [self._new() for _ in range(w.open_groups)]

    def _new(self) -> list[Any]:
        self.counter += 1
        length = self.rng.randint(MEAN_GROUP_LENGTH // 2, MEAN_GROUP_LENGTH * 3 // 2)
        return [f"{self.prefix}-g{self.counter}", 0, length]

    def next(self) -> tuple[str | None, bool, int]:
        """(guarantee ID or None, final, sequence number)."""
        if self.rng.random() >= self.w.grouped:
            return None, False, 0
        i = self.rng.randrange(len(self.slots))
        gid, seq, length = self.slots[i]
        final = seq == length - 1
        if final:
            self.slots[i] = self._new()
        else:
            self.slots[i][1] = seq + 1
        return gid, final, seq


def payloads(size: int, seed: int) -> list[bytes]:
    """Random payloads, distinct across more than lz4's 64 KB window: nothing for the
    compression to squeeze, so the figures are those of incompressible payloads (real
    ones usually compress), without paying for new random bytes per message."""
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(max(16, 256_000 // max(size, 1)))]


def _partition(gid: str | None, index: int, partitions: int) -> int:
    return zlib.crc32(gid.encode()) % partitions if gid else index % partitions


def fill(
    settings: RouterSettings,
    topic: str,
    w: Workload,
    count: int,
    seed: int,
    partitions: int = SOURCE_PARTITIONS,
) -> None:
    """Write `count` messages of the workload to `topic`'s first `partitions` partitions
    (idempotent, not transactional: its offsets are its messages)."""
    producer = Producer(
        {
            **clients.idempotent_producer_config(settings.kafka, f"bench-fill-{topic}"),
            "linger.ms": 50,
            "batch.size": 1_000_000,
        }
    )
    pool = payloads(w.size, seed)
    model = GroupModel(w, seed, topic)
    ids = random.Random(seed)
    for i in range(count):
        gid, final, seq = model.next()
        headers = contract.headers_for(gid, final=final, seq=seq if gid else None)
        if w.traced:  # as a Sender with tracing on sends it: a trace per message
            trace, span = ids.getrandbits(128) or 1, ids.getrandbits(64) or 1
            flags = SAMPLED if ids.random() < w.traced else 0
            headers.append((TRACEPARENT, format_traceparent(trace, span, flags)))
        payload = pool[i % len(pool)]
        while True:
            try:
                producer.produce(
                    topic,
                    payload,
                    gid.encode() if gid else None,
                    partition=_partition(gid, i, partitions),
                    headers=headers,
                )
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"filling {topic}: {left} messages not acknowledged")


def offer_load(
    config: dict[str, Any],
    topic: str,
    w: Workload,
    rate: float,
    seconds: float,
    seed: int,
    sent: Any,
) -> None:
    """The load generator (a process of its own): `rate` messages/s for `seconds`, each
    payload starting with the send time (ns since the epoch, big-endian)."""
    config = {k: v for k, v in config.items() if k != "logger"}
    producer = Producer(config)
    model = GroupModel(w, seed, f"{topic}-lat")
    pool = [p[8:] for p in payloads(max(w.size, 8), seed)]
    count = 0
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= seconds:
            break
        due = int(elapsed * rate) - count
        for _ in range(due):
            gid, final, seq = model.next()
            producer.produce(
                topic,
                struct.pack(">q", time.time_ns()) + pool[count % len(pool)],
                gid.encode() if gid else None,
                partition=_partition(gid, count, SOURCE_PARTITIONS),
                headers=contract.headers_for(gid, final=final, seq=seq if gid else None),
            )
            count += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(60)
    sent.value = count
