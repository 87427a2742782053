"""Where the drain's consumer stands on its room partitions: its position, or, on a partition
it has read nothing of since it was assigned it, where it reads from
(`router.backends.kafka.starts`). On a partition with nothing left to read past its committed
offset (every group there drained by the previous owner) `position()` never says anything:
without this, such a partition never caught up, and no group admitted on it without a record
in the room (a stray, `router.unit.steps.drain.step`) ever opened."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import TopicPartition

from router.backends.kafka.starts import Starts
from router.unit.steps.batch import TP


class Positions:
    def __init__(self, low: Callable[[list[TP]], Mapping[TP, int]] | None = None) -> None:
        """`low`: partitions' first offsets on a connection of their own
        (`router.backends.kafka.endoffsets.EndOffsets.starts`). Without it the consumer's
        own watermark request is asked, one partition at a time, and the broker answers
        each only after the consumer's fetch long-poll in flight: a new owner's first
        batch waited 1 to 3 s for its room partitions' starts (bench bursts, 2026-11-30)."""
        # the run loop waits for it: not long (the committed offsets; `low` has its own)
        self.starts = Starts(low, timeout_s=5.0)

    def forget(self, tps: Iterable[TP] | None = None) -> None:
        """Assigned again, revoked or rewound: read again when needed."""
        self.starts.forget(tps)

    def of(self, consumer: Any, owned: Iterable[TP]) -> dict[TP, int]:
        """The consumer's position on each owned room partition, its start if it has read
        nothing of it yet (-1 if the broker cannot say now: asked again next batch)."""
        positions = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.position([TopicPartition(*tp) for tp in owned])
        }
        unread = [tp for tp, at in positions.items() if at < 0]
        if unread:
            starts = self.starts.of(consumer, unread)
            for tp in unread:
                positions[tp] = starts.get(tp, -1)
        return positions
