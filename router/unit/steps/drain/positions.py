"""Where the drain's consumer stands on its room partitions. `position()` says nothing
(OFFSET_INVALID) until the consumer has read a record of the partition since it was assigned
it; on a partition with nothing left to read past its committed offset (every group drained
by the previous owner, the low mark at the end) it never does. The consumer then stands at
the offset it fetches from: the committed one, or the log start if none was committed. Read
once per assignment: without it such a partition never caught up, and no group admitted on
it without a record in the room (a stray, `router.unit.steps.drain.step`) ever opened."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from router.unit.steps.batch import TP

log = logging.getLogger("router.drain")

TIMEOUT_S = 10.0


class Positions:
    def __init__(self) -> None:
        self.starts: dict[TP, int] = {}  # where the consumer fetches from, before any record

    def forget(self, tps: Iterable[TP] | None = None) -> None:
        """Assigned again, revoked or rewound: read again when needed."""
        if tps is None:
            self.starts.clear()
        for tp in tps or ():
            self.starts.pop(tp, None)

    def of(self, consumer: Any, owned: Iterable[TP]) -> dict[TP, int]:
        """The consumer's position on each owned room partition, its start if it has read
        nothing of it yet (-1 if the broker cannot say now: asked again next batch)."""
        positions = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.position([TopicPartition(*tp) for tp in owned])
        }
        unread = [tp for tp, at in positions.items() if at < 0]
        if not unread:
            return positions
        ask = [tp for tp in unread if tp not in self.starts]
        if ask:
            self._read(consumer, ask)
        for tp in unread:
            positions[tp] = self.starts.get(tp, -1)
        return positions

    def _read(self, consumer: Any, tps: list[TP]) -> None:
        try:
            for c in consumer.committed([TopicPartition(*tp) for tp in tps], TIMEOUT_S):
                tp = (c.topic, c.partition)
                if c.offset >= 0:
                    self.starts[tp] = c.offset
                else:  # nothing committed: it fetches from the log start
                    low, _ = consumer.get_watermark_offsets(TopicPartition(*tp), TIMEOUT_S, False)
                    self.starts[tp] = int(low)
        except KafkaException as exc:
            log.warning("room partitions' committed offsets unknown, asked again later: %s", exc)
