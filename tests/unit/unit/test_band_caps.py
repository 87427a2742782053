"""Priority bands capped by the last stable offset (`router.contract.bandends`), under the
cases a review of its first version found: a committed offset past the last stable offset,
an answer below the reader's position, a partition whose leader is away while it looks
stuck (its asks back off alone), a committed-offsets answer with a partition's error (asked
again, not taken for its first offset) and an answer that comes while nothing is held (no
cap: newer records the reader fetches still count). Pure: a simulated clock, in-memory
consumers and brokers; each failed on the first version."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from router.contract.bandends import BandEnds
from router.metrics.registry import Metrics
from router.receiver import bandlag
from router.receiver.bands import ReceiverBands
from router.unit import bandsource
from router.unit.bandsource import BandSource

TP = tuple[str, int]
CLOCK = [2_000.0]


class Consumer:
    """positions: tp -> (position, cached high); committed: tp -> committed offset (or an
    error string: a per-partition error in the OffsetFetch answer)."""

    def __init__(self, positions: dict[TP, tuple[int, int]], committed: dict[TP, Any]):
        self.positions, self.committed_offsets = positions, committed

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.positions]

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(t.topic, t.partition, self.positions[(t.topic, t.partition)][0])
            for t in tps
        ]

    def get_watermark_offsets(self, tp: TopicPartition, timeout=None, cached=False):
        assert cached
        return 0, self.positions[(tp.topic, tp.partition)][1]

    def committed(self, tps: list[TopicPartition], timeout: float = 0) -> list[Any]:
        out = []
        for tp in tps:
            c = self.committed_offsets.get((tp.topic, tp.partition), -1001)
            if isinstance(c, str):
                out.append(
                    SimpleNamespace(
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=-1001,
                        error=KafkaError(KafkaError._TIMED_OUT),
                    )
                )
            else:
                out.append(
                    SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=c, error=None)
                )
        return out

    def pause(self, tps: Any) -> None: ...
    def resume(self, tps: Any) -> None: ...
    def seek(self, tp: Any) -> None: ...


class Broker:
    """Last stable offsets (`ends`), first offsets 0; partitions in `away` left out."""

    def __init__(self, ends: dict[TP, int], away: set[TP] = frozenset(), took: float = 0.001):
        self.ends, self.away, self.took = ends, set(away), took
        self.asked: list[list[TP]] = []

    def __call__(self, tps: Any) -> dict[TP, int]:
        wanted = list(tps)
        self.asked.append(wanted)
        CLOCK[0] += self.took
        return {tp: self.ends[tp] for tp in wanted if tp in self.ends and tp not in self.away}

    def starts(self, tps: Any) -> dict[TP, int]:
        return {tp: 0 for tp in tps}

    def close(self) -> None: ...


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bandsource.time, "monotonic", lambda: CLOCK[0])
    monkeypatch.setattr(bandlag.time, "monotonic", lambda: CLOCK[0])


def unit_turns(bands: BandSource, tps: list[TP], seconds: float) -> list[tuple[float, Any]]:
    out, start = [], CLOCK[0]
    while CLOCK[0] - start < seconds:
        out.append((CLOCK[0] - start, bands.before_poll(tps, [])))
        CLOCK[0] += 0.02
    return out


# A committed offset past the LSO (an offsets reset --to-latest, a read_uncommitted tool
# in the group): the unread partition's start (9) is past its LSO (7); the first version
# took the answer for "read past" and dropped it, and the open transaction counted again.


def test_unit_committed_offset_past_the_lso_keeps_the_band_backlogged() -> None:
    c = Consumer({("q", 0): (5, 1000), ("q.p2", 0): (-1001, 11)}, {("q.p2", 0): 9})
    broker = Broker({("q", 0): 1000, ("q.p2", 0): 7})
    bands = BandSource(c, ["q"], 3, 0.1, Metrics(), ends=broker)
    late = [t for at, t in unit_turns(bands, list(c.positions), 5) if at >= 2]
    assert sum(0 in t.bands and not t.share for t in late) > 0.8 * len(late)


def test_receiver_committed_offset_past_the_lso_keeps_the_band_backlogged() -> None:
    c = Consumer({("q", 0): (5, 1000), ("q.p2", 0): (-1001, 11)}, {("q.p2", 0): 9})
    bands = ReceiverBands(c, ["q"], 3, ends=Broker({("q", 0): 1000, ("q.p2", 0): 7}))
    start = CLOCK[0]
    while CLOCK[0] - start < 5:
        bands.before_poll()
        CLOCK[0] += 0.02
    assert bands.lag[("q.p2", 0)] == 0  # nothing of it can be read


def test_an_lso_answer_below_the_position_is_not_taken_for_read_past() -> None:
    """A lagging new leader's LSO (5) below the reader's position (7), the open
    transaction at 7 still holding 4 records: nothing is readable past 7."""
    marks = BandEnds(1.0)
    marks.seen(("t", 0), 11)
    marks.answered(("t", 0), 5, now=0.0, at=7)
    assert marks.end(("t", 0), 7) == 7
    assert marks.end(("t", 0), 8) == 11  # read past: the transaction ended


# A stuck partition whose leader is away: in the first version it shared the paused asks'
# pacer, and its missing answer backed every paused ask off to 30 s, so a lower band's new
# backlog was seen up to ~30 s late instead of ~1 s. Each kind is paced apart now.


def test_unit_a_stuck_partition_with_its_leader_away_delays_lower_bands_news() -> None:
    c = Consumer({("q", 0): (5, 5), ("q.p2", 0): (0, 10**6)}, {})
    broker = Broker({("q", 0): 5, ("q.p2", 0): 10**6}, away={("q.p2", 0)})
    bands = BandSource(c, ["q"], 3, 0.1, Metrics(), ends=broker)
    tps = list(c.positions)
    unit_turns(bands, tps, 40)
    broker.ends[("q", 0)] = 50  # band 0 gets records while paused
    seen = next((at for at, t in unit_turns(bands, tps, 40) if 0 in t.bands), None)
    assert seen is not None and seen < 3, seen


def test_receiver_a_stuck_partition_with_its_leader_away_delays_lower_bands_news() -> None:
    c = Consumer({("q", 0): (5, 5), ("q.p2", 0): (0, 10**6)}, {})
    broker = Broker({("q", 0): 5, ("q.p2", 0): 10**6}, away={("q.p2", 0)})
    bands = ReceiverBands(c, ["q"], 3, ends=broker)
    start = CLOCK[0]
    while CLOCK[0] - start < 40:
        bands.before_poll()
        CLOCK[0] += 0.02
    broker.ends[("q", 0)] = 50
    start = CLOCK[0]
    while bands.lag.get(("q", 0), 0) == 0 and CLOCK[0] - start < 40:
        bands.before_poll()
        CLOCK[0] += 0.02
    assert CLOCK[0] - start < 3, CLOCK[0] - start


# The unit's starts come from the shared `Starts`, which took a partition answered with an
# error in the committed-offsets answer to start at its first offset: a partition fully
# consumed (committed 100 = its end) showed 100 phantom records until something new was
# read of it, and band 2 took every turn. Such a partition is asked again now.


def test_unit_a_per_partition_committed_error_makes_a_phantom_backlog() -> None:
    c = Consumer({("q", 0): (5, 1000), ("q.p2", 0): (-1001, 100)}, {("q.p2", 0): "error"})
    broker = Broker({("q", 0): 1000, ("q.p2", 0): 100})
    bands = BandSource(c, ["q"], 3, 0.1, Metrics(), ends=broker)
    tps = list(c.positions)
    unit_turns(bands, tps, 0.1)  # the answer with the error
    c.committed_offsets[("q.p2", 0)] = 100  # answered properly now
    late = [t for at, t in unit_turns(bands, tps, 10) if at >= 2]
    assert sum(0 in t.bands and not t.share for t in late) > 0.8 * len(late)


# An answer to a crowded ask (a fetched higher-band partition that looked empty) capped the
# end in the first version: once the reader reached that answer, newer committed records it
# had fetched (cached high 15) were hidden, and the lower bands were resumed beside band 2.
# An answer at or past the high watermark known holds nothing back: no cap.


def test_unit_a_crowded_answer_hides_newer_readable_records() -> None:
    c = Consumer({("q", 0): (5, 10**6), ("q.p2", 0): (3, 3)}, {})
    broker = Broker({("q", 0): 10**6, ("q.p2", 0): 10})
    full = [True]
    bands = BandSource(
        c, ["q"], 3, 0.1, Metrics(), refresh_s=60.0, ends=broker, crowded=lambda: full[0]
    )
    tps = list(c.positions)
    assert bands.before_poll(tps, []).bands == {2}  # crowded ask: LSO 10
    full[0] = False
    c.positions[("q.p2", 0)] = (10, 15)  # read to 10; its fetch says 5 more, committed
    broker.ends[("q.p2", 0)] = 15
    assert bands.before_poll(tps, []).bands == {2}


# A request that asked only one kind must not pace the other: a paused partition whose
# leader is away backs off, and a stuck partition's quick answers must not reset that.


class HalfAway(Broker):
    """Requests naming an `away` partition run to their time-out (2 s) and leave it out."""

    def __call__(self, tps: Any) -> dict[TP, int]:
        wanted = list(tps)
        self.asked.append(wanted)
        CLOCK[0] += 2.0 if any(tp in self.away for tp in wanted) else 0.001
        return {tp: self.ends[tp] for tp in wanted if tp in self.ends and tp not in self.away}


def test_unit_quick_stuck_answers_keep_a_paused_partitions_back_off() -> None:
    c = Consumer({("q", 0): (5, 5), ("q.p2", 0): (7, 11)}, {})
    broker = HalfAway({("q", 0): 5, ("q.p2", 0): 11}, away={("q", 0)})
    bands = BandSource(c, ["q"], 3, 0.1, Metrics(), ends=broker)
    tps = list(c.positions)
    start, held = CLOCK[0], 0.0
    while CLOCK[0] - start < 300:
        t0 = CLOCK[0]
        bands.before_poll(tps, [])
        held += CLOCK[0] - t0
        CLOCK[0] += 0.02
    assert held / (CLOCK[0] - start) <= 0.1
    # backed off 1, 2, 4 ... 30 s: about 14 asks in 300 s (the stuck answers reset it before)
    assert sum(("q", 0) in ask for ask in broker.asked) <= 18, broker.asked


def test_receiver_quick_stuck_answers_keep_a_paused_partitions_back_off() -> None:
    c = Consumer({("q", 0): (5, 5), ("q.p2", 0): (7, 11)}, {})
    broker = HalfAway({("q", 0): 5, ("q.p2", 0): 11}, away={("q", 0)})
    bands = ReceiverBands(c, ["q"], 3, ends=broker)
    start, held = CLOCK[0], 0.0
    while CLOCK[0] - start < 300:
        t0 = CLOCK[0]
        bands.before_poll()
        held += CLOCK[0] - t0
        CLOCK[0] += 0.02
    assert held / (CLOCK[0] - start) <= 0.1
    assert sum(("q", 0) in ask for ask in broker.asked) <= 18, broker.asked


# A stuck partition whose leader is away runs its request to the time-out (2 s): asked in
# the paused partitions' request (a version of this change did), it held theirs as long, and
# both kinds were paced to 20 x 2 s: a lower band's new records were counted ~40 s late
# (a second review, a jittery loop). Each kind has a request of its own now.


def worst_delay(step: Any, seen: Any, broker: Broker, c: Consumer, seed: int) -> float:
    """A jittery loop for 300 s, then band 0 gets records six times: the worst time until
    it is counted."""
    rnd = random.Random(seed)
    start = CLOCK[0]
    while CLOCK[0] - start < 300:
        step()
        CLOCK[0] += rnd.uniform(0.01, 0.1)
    worst = 0.0
    for i in range(6):
        broker.ends[("q", 0)] = 50 + i  # band 0 gets records while paused
        t0 = CLOCK[0]
        while not seen() and CLOCK[0] - t0 < 120:
            step()
            CLOCK[0] += rnd.uniform(0.01, 0.1)
        worst = max(worst, CLOCK[0] - t0)
        c.positions[("q", 0)] = (50 + i, 50 + i)  # read
        t1 = CLOCK[0]
        while CLOCK[0] - t1 < 7 * (i + 1):
            step()
            CLOCK[0] += rnd.uniform(0.01, 0.1)
    return worst


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unit_a_stuck_partitions_time_out_does_not_pace_the_paused_asks(seed: int) -> None:
    c = Consumer({("q", 0): (5, 5), ("q.p2", 0): (0, 10**6)}, {})
    broker = HalfAway({("q", 0): 5, ("q.p2", 0): 10**6}, away={("q.p2", 0)})
    bands = BandSource(c, ["q"], 3, 0.1, Metrics(), ends=broker)
    tps = list(c.positions)
    last: dict[str, Any] = {}

    def step() -> None:
        last["turn"] = bands.before_poll(tps, [])

    delay = worst_delay(step, lambda: 0 in last["turn"].bands, broker, c, seed)
    assert delay < 3, f"band 0's new records counted {delay:.1f} s late"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_receiver_a_stuck_partitions_time_out_does_not_pace_the_paused_asks(seed: int) -> None:
    c = Consumer({("q", 0): (5, 5), ("q.p2", 0): (0, 10**6)}, {})
    broker = HalfAway({("q", 0): 5, ("q.p2", 0): 10**6}, away={("q.p2", 0)})
    bands = ReceiverBands(c, ["q"], 3, ends=broker)
    delay = worst_delay(bands.before_poll, lambda: bands.lag.get(("q", 0), 0) > 0, broker, c, seed)
    assert delay < 3, f"band 0's new records counted {delay:.1f} s late"
