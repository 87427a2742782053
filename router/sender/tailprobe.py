"""Read a send-queue partition's tail for some groups' members (a restarted `Sender`).

Reads `read_uncommitted` (the Sender does not use transactions; another producer's open
transaction must not stop the scan) from the lowest `scan_from` of the lane's groups to
the high watermark taken at the start, and returns, per group, its members in offset
order (`router.state.sender.resume` decides what they mean).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from router.contract.headers import routing_of
from router.errors import TimedOut
from router.state.sender import TailRecord

TP = tuple[str, int]


def probe(
    connection: Mapping[str, Any], tp: TP, start: int, gids: set[str], timeout: float = 60.0
) -> dict[str, list[TailRecord]]:
    """Members of `gids` on partition `tp` from offset `start` to its end."""
    consumer = Consumer(
        {
            **connection,
            "group.id": f"sender-probe-{uuid.uuid4().hex[:10]}",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
            "auto.offset.reset": "earliest",
        }
    )
    found: dict[str, list[TailRecord]] = {g: [] for g in gids}
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=30)
        at = max(start, low)
        if at >= high:
            return found
        consumer.assign([TopicPartition(tp[0], tp[1], at if at > 0 else OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while at < high:
            if time.monotonic() > deadline:
                raise TimedOut(f"reading {tp[0]}[{tp[1]}] to {high} took over {timeout}s")
            for m in consumer.consume(500, 1.0):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                at = m.offset() + 1
                gid, final, seq = routing_of(list(m.headers() or []))
                if gid in found:
                    found[gid].append(TailRecord(m.offset(), seq, final))
            position = consumer.position([TopicPartition(*tp)])[0].offset
            at = max(at, position)  # past control records too, which are never returned
    finally:
        consumer.close()
    return found
