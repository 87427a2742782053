"""Where a consumer reads a partition from before it has read a record of it. `position()`
says nothing (OFFSET_INVALID) until then, and on a partition with nothing to read past its
committed offset it never says anything: the consumer stands at that committed offset (at
the partition's first offset if retention deleted the records up to it), or, none
committed, at the partition's first offset (the router's consumers reset to the
earliest). Read once per assignment and kept (the receiver's priority bands, the drain
step's room partitions)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

log = logging.getLogger("router.kafka")

TP = tuple[str, int]


class Starts:
    def __init__(
        self, low: Callable[[list[TP]], Mapping[TP, int]] | None = None, timeout_s: float = 10.0
    ) -> None:
        """`low`: partitions' first offsets (default: the consumer's own watermark request,
        one partition at a time)."""
        self._low = low
        self.timeout_s = timeout_s
        self.known: dict[TP, int] = {}

    def forget(self, tps: Iterable[TP] | None = None) -> None:
        """Assigned again, revoked or rewound: asked again when needed."""
        if tps is None:
            self.known.clear()
        for tp in tps or ():
            self.known.pop(tp, None)

    def of(self, consumer: Any, tps: Iterable[TP]) -> dict[TP, int]:
        """Each partition's start, asked once (those the broker cannot say now are left
        out: asked again next time)."""
        tps = list(tps)
        ask = [tp for tp in tps if tp not in self.known]
        if ask:
            self._read(consumer, ask)
        return {tp: self.known[tp] for tp in tps if tp in self.known}

    def _read(self, consumer: Any, tps: list[TP]) -> None:
        try:
            got = consumer.committed([TopicPartition(*tp) for tp in tps], self.timeout_s)
        except KafkaException as exc:
            log.debug("committed offsets of %s unknown, asked again later: %s", tps, exc)
            return
        committed = {(c.topic, c.partition): c.offset for c in got if c.offset >= 0}
        # A partition the coordinator answered with an error is asked again next time, not
        # taken to start at its first offset (a phantom backlog of what was read).
        failed = {(c.topic, c.partition): c.error for c in got if c.error is not None}
        if failed:
            log.debug("committed offsets unknown, asked again later: %s", failed)
            tps = [tp for tp in tps if tp not in failed]
        lows = self._lows(consumer, tps) if tps else {}
        # Each partition whose first offset the broker said (the others are asked again next
        # time): its committed offset, but no lower than its first. Past a committed offset
        # that retention deleted, the consumer's fetch is out of range and it resets to the
        # first offset (earliest).
        for tp, low in lows.items():
            self.known[tp] = max(committed.get(tp, low), low)

    def _lows(self, consumer: Any, tps: list[TP]) -> Mapping[TP, int]:
        if self._low is not None:
            return self._low(tps)
        out = {}
        for tp in tps:
            try:
                low, _ = consumer.get_watermark_offsets(TopicPartition(*tp), self.timeout_s, False)
            except KafkaException as exc:
                log.debug("first offset of %s[%d] unknown, asked again later: %s", *tp, exc)
                continue
            out[tp] = int(low)
        return out
