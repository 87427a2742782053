"""A unit's consumer across priority bands: before each poll, pause and resume the
partitions of its source topics' bands as the scheduler says (`router.contract.bandsched`).

One consumer reads every band of the unit's sources, so one transaction commits the
offsets of every band it consumed. A band's backlog is the sum, over its assigned
partitions, of where the partition ends for a `read_committed` reader less the consumer's
position (the committed offset until a message was consumed): `router.contract.bandends`,
the high watermark capped by the last stable offset the broker gave while the consumer has
not read past it (a transaction left open looks like a backlog that cannot be read).
Watermarks of partitions being fetched come with the fetch responses (librdkafka's cached
values); the broker is asked the last stable offsets of a paused partition at most once per
`refresh_s`, and only while it looks empty (a backlog only grows while paused), of a
fetched one that looks backlogged at the same position for `refresh_s` (an open
transaction), and, while the local queue is full (no fetch then tells of a first record),
of the partitions that look empty in the bands above the last turn's lowest
(`_ask_crowded`), each time in one request on an admin client of the unit's (not through
the consumer, whose connection answers only after its fetch in flight:
`router.backends.kafka.endoffsets`). Partitions held by the busy policy `hold` (or
backing off) stay as the unit left them; partitions of other topics (the waiting room) are
never touched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from router.backends.kafka.clients import admin_config
from router.backends.kafka.endoffsets import EndOffsets, Watermarks
from router.backends.kafka.starts import Starts
from router.config.settings import RouterSettings
from router.contract.bandends import BandEnds
from router.contract.bandsched import BandScheduler, Turn
from router.contract.priority import split
from router.metrics.registry import Metrics
from router.unit.source import Source
from router.unit.stalls import StallGuard
from router.unit.steps.batch import TP
from router.utils.clock import Pacer

log = logging.getLogger("router.bandsource")

WATERMARK_TIMEOUT_S = 2.0
# While the unit's local queue is full (its last poll stopped at the batch's size), librdkafka
# fetches nothing until the queue drops below its threshold, and then a fetch's worth of the
# lower bands (up to `max.partition.fetch.bytes` a partition) lands at once: a partition of a
# higher band that looks empty learns of its first message only at the next such fetch,
# hundreds of milliseconds later under a backlog of small records. Its watermark is then
# asked this often instead (docs/explanation/priority.md).
CROWDED_REFRESH_S = 0.05
# How long a fetch waits for data (librdkafka's default 500 ms): a higher band's first
# messages after a quiet spell waited about that long (docs/explanation/priority.md).
# (Every unit's consumer also sets `fetch.queue.backoff.ms` to 10 ms:
# `router.backends.kafka.clients.consumer_config`.)
FETCH_WAIT_MAX_MS = 100
COMPLAIN_S = 30.0  # between two warnings about one partition's failed broker calls
NEVER = float("-inf")  # a time.monotonic() long ago (it starts near 0 on a fresh machine)


class BandSource:
    def __init__(
        self,
        consumer: Consumer,
        bases: Iterable[str],
        bands: int,
        min_share: float,
        metrics: Metrics,
        refresh_s: float = 1.0,
        stalls: StallGuard | None = None,
        *,
        ends: Watermarks,
        crowded: Callable[[], bool] = lambda: False,
    ) -> None:
        self.consumer = consumer
        self.crowded = crowded  # whether the local queue is full (`Source.full`)
        # paused partitions' watermarks: not through the consumer, whose connection answers
        # only after its fetch in flight (router.backends.kafka.endoffsets)
        self.ends = ends
        self.stalls = stalls  # told of the partitions resumed (paused: not unread)
        self.bases = frozenset(bases)
        self.bands = bands
        self.scheduler = BandScheduler(bands, min_share)
        self.metrics = metrics
        self.refresh_s = refresh_s
        self.paused: set[TP] = set()  # paused by band, as far as this class knows
        self.marks = BandEnds(refresh_s)  # where each partition ends (read_committed)
        # where a partition starts (nothing consumed yet)
        self.starts = Starts(ends.starts, WATERMARK_TIMEOUT_S)
        self._asked: dict[TP, float] = {}  # when a paused partition's watermark was asked
        self.turn: Turn | None = None
        self._floor = 0  # the lowest band of the last turn that was not a share turn
        # the four kinds of request, each holding the loop until answered or timed out,
        # each paced by what it took (`router.utils.clock.Pacer`; after an unanswered one,
        # `refresh_s` doubling): the ends of paused partitions, those of higher bands while
        # the queue is full (`_ask_crowded`), those of fetched ones that look stuck, and
        # where partitions start
        self._paused_asks = Pacer(0.0, backoff_s=refresh_s)
        self._crowded_asks = Pacer(CROWDED_REFRESH_S, backoff_s=refresh_s)
        self._stuck_asks = Pacer(0.0, backoff_s=refresh_s)  # apart: one left out backs off alone
        self._starts_asks = Pacer(refresh_s, backoff_s=refresh_s)
        self._complained: dict[TP, float] = {}

    @staticmethod
    def tuned(settings: RouterSettings, config: dict[str, Any]) -> dict[str, Any]:
        """A unit's consumer configuration for its bands (unchanged with one band; a
        `fetch.wait.max.ms` from `kafka.client_config` is kept)."""
        if settings.priority.bands > 1:
            config.setdefault("fetch.wait.max.ms", FETCH_WAIT_MAX_MS)
        return config

    @classmethod
    def of(
        cls, settings: RouterSettings, side: str, source: Source, metrics: Metrics
    ) -> BandSource | None:
        """A unit's band source over its source's consumer; None if the topology has one
        band."""
        p, t = settings.priority, settings.topology
        if p.bands == 1:
            return None
        bases = t.send_queues if side == "send" else [t.transfer_topic]
        # the last stable offsets: where a read_committed consumer can read to
        ends = EndOffsets(admin_config(settings.kafka), WATERMARK_TIMEOUT_S)
        return cls(
            source.consumer,
            bases,
            p.bands,
            p.min_share,
            metrics,
            stalls=source.stalls,
            ends=ends,
            crowded=lambda: source.full,
        )

    def band(self, tp: TP) -> int | None:
        """The band of a source partition; None for other topics."""
        base, band = split(tp[0], self.bases)
        return band if base in self.bases else None

    def reset(self) -> None:
        """The unit resumed every partition itself (after a back-off)."""
        self.paused.clear()

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions assigned (paused or resumed by the unit) or revoked."""
        for tpp in partitions:
            tp = (tpp.topic, tpp.partition)
            self.paused.discard(tp)
            self.marks.forget(tp)
            self.starts.forget([tp])
            self._asked.pop(tp, None)
            self._complained.pop(tp, None)

    def before_poll(self, assigned: Iterable[TP], waiting: Iterable[TP]) -> Turn:
        """Pause and resume for the next batch; the turn taken."""
        mine = {tp: b for tp in assigned if (b := self.band(tp)) is not None}
        turn = self.turn = self.scheduler.next(self.backlog(mine))
        if not turn.share:
            self._floor = min(turn.bands)
        held = set(waiting)
        stop = [tp for tp, b in mine.items() if b not in turn.bands]
        go = [tp for tp, b in mine.items() if b in turn.bands and tp in self.paused]
        go = [tp for tp in go if tp not in held]
        if stop:
            self.consumer.pause([TopicPartition(t, p) for t, p in stop])
            self.paused.update(stop)
        if go:
            self.consumer.resume([TopicPartition(t, p) for t, p in go])
            self.paused.difference_update(go)
            if self.stalls is not None:
                self.stalls.resumed(go, time.monotonic())
        if turn.share:
            self.metrics.inc("band_share_turns")
        return turn

    def backlog(self, mine: dict[TP, int]) -> list[int]:
        """Each band's backlog over the partitions in `mine` (partition -> band)."""
        out = [0] * self.bands
        if not mine:
            return out
        consumer = self.consumer
        now = time.monotonic()
        try:
            positions = consumer.position([TopicPartition(t, p) for t, p in mine])
        except KafkaException as exc:
            log.warning("cannot read positions: %s", exc)
            return out
        self._ask_starts([(t.topic, t.partition) for t in positions if t.offset < 0], now)
        at: dict[TP, int] = {}
        stale: list[TP] = []  # paused and looking empty: asked, all in one request
        stuck: list[TP] = []  # fetched and not moving, as if backlogged: another one
        ask_paused, every, marks = self._paused_asks.due(now), self.refresh_s, self.marks
        ask_stuck = self._stuck_asks.due(now)
        for tpp in positions:
            tp = (tpp.topic, tpp.partition)
            pos = at[tp] = tpp.offset if tpp.offset >= 0 else self.starts.known.get(tp, -1)
            if tp in self.paused:
                if (
                    ask_paused
                    and marks.end(tp, pos) <= pos
                    and now - self._asked.get(tp, NEVER) >= every
                ):
                    stale.append(tp)
            else:
                marks.seen(tp, self._cached(tpp))
                if marks.stuck(tp, pos, now) and ask_stuck:
                    stuck.append(tp)
        # a request of each kind: a leader away for one kind's partitions holds its own
        # request to its time-out, and paces (or backs off) that kind alone
        if stale:
            self._ask(self._paused_asks, stale, at)
        if stuck:
            self._ask(self._stuck_asks, stuck, at)
        if self.crowded() and self._crowded_asks.due(now):
            self._ask_crowded(mine, at)
        for tp, pos in at.items():
            end = marks.end(tp, pos)
            if pos >= 0 and end > pos:
                out[mine[tp]] += end - pos
        return out

    def _ask_crowded(self, mine: dict[TP, int], at: dict[TP, int]) -> None:
        """The local queue is full: ask the broker, in one request, the ends of the
        partitions that look empty in the bands above the last turn's lowest (a record
        there would take the next turn), which no fetch tells of now. Asked at most every
        `CROWDED_REFRESH_S`, paced like every request (`Pacer`)."""
        ask = [
            tp
            for tp, band in mine.items()
            if band > self._floor and tp not in self.paused and self.marks.end(tp, at[tp]) <= at[tp]
        ]
        if ask:
            self._ask(self._crowded_asks, ask, at)
            self.metrics.inc("band_crowded_asks")

    def _ask(self, pacer: Pacer, ask: list[TP], at: dict[TP, int]) -> None:
        """Ask the broker the ends (last stable offsets) of `ask`, in one request, and pace
        the next one of its kind by it (`pacer`): an exception or a partition left out is
        an unanswered request."""
        began = time.monotonic()
        for tp in ask:
            self._asked[tp] = began  # a paused partition: asked again `refresh_s` after this
        try:
            got = self.ends(ask)
        except Exception as exc:  # an admin client that cannot be made, say
            log.debug("no watermarks for %d partitions: %r", len(ask), exc)
            got = {}
        answered = time.monotonic()
        pacer.done(began, answered, answered=all(tp in got for tp in ask))
        for tp in ask:
            if tp in got:
                self.marks.answered(tp, got[tp], answered, at[tp])
            else:
                self._complain(tp, "no watermark")

    def _cached(self, tp: TopicPartition) -> int:
        """A fetched partition's high watermark as its last fetch response gave it."""
        try:
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException as exc:
            self._complain((tp.topic, tp.partition), f"no watermark: {exc}")
            return -1
        return int(high)

    def _complain(self, tp: TP, what: str) -> None:
        """A broker call for a band's backlog failed (one request for all the partitions
        asked, waiting up to `WATERMARK_TIMEOUT_S` on the unit's loop): said once per
        `COMPLAIN_S` a partition."""
        now = time.monotonic()
        if now - self._complained.get(tp, NEVER) >= COMPLAIN_S:
            self._complained[tp] = now
            log.warning("%s for %s[%d] (its band's backlog left out)", what, *tp)

    def _ask_starts(self, tps: list[TP], now: float) -> None:
        """Learn where partitions the unit consumed nothing of start (`Starts`: their
        committed offsets, no lower than their first). One request for all of them, at
        most once per `refresh_s` and paced (`Pacer`): a coordinator that does not answer
        (seen after a broker restart) costs the loop one `WATERMARK_TIMEOUT_S` per
        back-off; until it answers, their backlog is left out."""
        unknown = [tp for tp in tps if tp not in self.starts.known]
        if not unknown or not self._starts_asks.due(now):
            return
        began = time.monotonic()
        got = self.starts.of(self.consumer, unknown)
        self._starts_asks.done(began, time.monotonic(), len(got) == len(unknown))
        for tp in unknown:
            if tp not in got:
                self._complain(tp, "where it starts unknown")
