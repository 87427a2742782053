"""How far behind a receiver is in each band of its queues (`router.receiver.bands`): each
band's backlog, where its partitions end for a `read_committed` reader less the position,
summed over the band's partitions (`router.contract.bandends`: the high watermark, capped
by the last stable offset the broker gave while the reader has not read past it).

A paused partition is not fetched, so librdkafka's cached watermark of it stays where it
was; a partition nothing was read of has no position yet; a fetched one whose cached high
watermark stays past a position that does not move holds an open transaction. Their last
stable offsets and starts are asked of the broker, on a connection of its own
(`router.backends.kafka.endoffsets`), each kind in one request, and each request holds
the caller's poll until answered or timed out: each kind is paced by what its last request
took (`router.utils.clock.Pacer`; the units' `router.unit.bandsource` alike).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from confluent_kafka import TopicPartition

from router.backends.kafka.endoffsets import Watermarks
from router.backends.kafka.starts import Starts
from router.contract.bandends import BandEnds
from router.contract.priority import split
from router.utils.clock import Pacer

TP = tuple[str, int]
STARTS_TIMEOUT_S = 5.0


class BandLag:
    def __init__(self, consumer: Any, bases: frozenset[str], bands: int, ends: Watermarks) -> None:
        self.consumer = consumer
        self.bases = bases
        self.bands = bands
        self.ends = ends
        self.starts = Starts(ends.starts, STARTS_TIMEOUT_S)  # where nothing was read yet
        self.lag: dict[TP, int] = {}  # as last measured
        self.asked: dict[TP, float] = {}  # when a partition's watermark was last asked
        self.refresh_s = 1.0
        self.marks = BandEnds(self.refresh_s)  # where each partition ends (read_committed)
        self._end_asks = Pacer(0.0)  # watermarks (each partition once per refresh_s)
        self._stuck_asks = Pacer(0.0)  # apart: one left out backs off alone
        self._start_asks = Pacer(0.0)

    def forget(self, key: TP) -> None:
        """Revoked: asked afresh if assigned again."""
        self.asked.pop(key, None)
        self.marks.forget(key)
        self.starts.forget([key])
        self.lag.pop(key, None)

    def backlog(self, assigned: list[TopicPartition], paused: Collection[TP]) -> list[int]:
        """Each band's backlog: where each partition ends (`marks.end`) less the position
        (the committed offset, or the low watermark, until something was read). A paused
        partition is not fetched, so its cached watermark stays where it was: one that
        looks empty is asked from the broker at most once per `refresh_s` (as the units
        do, `router.unit.bandsource`), else a lower band paused while empty never shows its
        new backlog, never earns its share, and waits as long as a higher band has one. A
        partition never fetched yet is asked once too: before its first fetch its cached
        watermark is unknown, and the first turn would otherwise read every band and hand
        out whichever record came first, a lower band's older one included."""
        out = [0] * self.bands
        now = time.monotonic()
        rows: list[tuple[TP, int, int]] = []  # partition, band, where it is read from
        stale: list[TP] = []  # asked from the broker, all in one request
        stuck: list[TP] = []  # fetched and not moving, as if backlogged: another one
        positions = self.consumer.position(assigned)
        self._learn_starts([(tp.topic, tp.partition) for tp in positions if tp.offset < 0])
        ask, marks = self._end_asks.due(now), self.marks
        ask_stuck = self._stuck_asks.due(now)
        for tp in positions:
            key = (tp.topic, tp.partition)
            band = split(tp.topic, self.bases)[1]
            marks.seen(key, self.consumer.get_watermark_offsets(tp, cached=True)[1])
            at = tp.offset if tp.offset >= 0 else self.starts.known.get(key, -1)
            if ask and (
                key not in self.asked  # never fetched yet: the first turn needs it
                or (
                    key in paused
                    and marks.end(key, at) <= at
                    and now - self.asked[key] >= self.refresh_s
                )
            ):
                stale.append(key)
            elif key not in paused and marks.stuck(key, at, now) and ask_stuck:
                stuck.append(key)  # an open transaction, or its end not read yet
            rows.append((key, band, at))
        ats = {key: at for key, _, at in rows}
        # a request of each kind: a leader away for one kind's partitions holds its own
        # request to its time-out, and paces (or backs off) that kind alone
        if stale:
            self._ask_ends(stale, self._end_asks, ats)
        if stuck:
            self._ask_ends(stuck, self._stuck_asks, ats)
        for key, band, at in rows:
            end = marks.end(key, at)
            self.lag[key] = end - at if at >= 0 and end > at else 0
            if at >= 0 and end > at:
                out[band] += end - at
        return out

    def _ask_ends(self, stale: list[TP], pacer: Pacer, ats: dict[TP, int]) -> None:
        """The broker's last stable offsets of `stale` (their readers at `ats`), in one
        request; the next one of its kind paced by it (`pacer`)."""
        began = time.monotonic()
        for key in stale:
            self.asked[key] = began
        got = self.ends(stale)
        ended = time.monotonic()
        pacer.done(began, ended, answered=len(got) == len(stale))
        for key, stable in got.items():
            self.marks.answered(key, stable, ended, ats[key])

    def _learn_starts(self, keys: list[TP]) -> None:
        """Where partitions nothing was read of yet start, in one request, paced by what it
        took (a coordinator that does not answer holds the caller's poll once per back-off,
        not once per partition per poll); until it answers, their backlog is left out."""
        unknown = [key for key in keys if key not in self.starts.known]
        if not unknown or not self._start_asks.due():
            return
        began = time.monotonic()
        got = self.starts.of(self.consumer, unknown)
        self._start_asks.done(began, time.monotonic(), answered=len(got) == len(unknown))
