"""Priority bands ask paused partitions' watermarks of the broker on a connection of their
own, all in one request (`router.backends.kafka.endoffsets`): never through the unit's
consumer, whose connection answers only after its fetch in flight (up to 500 ms each; the
short priority bench stage failed a CI run on it)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from router.metrics.registry import Metrics
from router.unit import bandsource
from router.unit.bandsource import BandSource
from tests.fixtures.bands import AwayCoordinator, FakeConsumer, FakeEnds

TP = tuple[str, int]


class CachedOnly(FakeConsumer):
    """A consumer that may be asked only its cached watermarks (from its fetches)."""

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        assert cached, f"{tp.topic}[{tp.partition}] asked through the consumer"
        return super().get_watermark_offsets(tp, cached=True)


class Broker(FakeEnds):
    """The broker's ends, ahead of what the consumer last fetched."""

    def __init__(self, consumer: Any, ends: dict[TP, int]) -> None:
        super().__init__(consumer)
        self.ends = ends

    def __call__(self, tps: Any) -> dict[TP, int]:
        wanted = list(tps)
        self.asked.append(wanted)
        return {tp: self.ends[tp] for tp in wanted if tp in self.ends}


def test_paused_partitions_are_asked_in_one_request_and_not_through_the_consumer() -> None:
    consumer = CachedOnly({("q", 0): (5, 5), ("q", 1): (7, 7), ("q.p2", 0): (0, 4)})
    broker = Broker(consumer, {("q", 0): 9, ("q", 1): 7})
    bands = BandSource(consumer, ["q"], 3, 0.1, Metrics(), refresh_s=60.0, ends=broker)
    tps = list(consumer.positions)
    assert bands.before_poll(tps, []).bands == {2}  # band 2 has a backlog: q is paused
    assert broker.asked == [] and bands.paused == {("q", 0), ("q", 1)}
    consumer.positions[("q.p2", 0)] = (4, 4)  # band 2 drained
    turn = bands.before_poll(tps, [])
    assert broker.asked == [[("q", 0), ("q", 1)]], "paused and looking empty: one request"
    assert turn.bands == {0, 1, 2}  # q[0] has 4 new records the consumer never fetched
    assert bands.before_poll(tps, []) and len(broker.asked) == 1  # resumed: fetched again


def test_a_partition_the_broker_cannot_say_keeps_what_was_known() -> None:
    consumer = CachedOnly({("q", 0): (5, 5), ("q.p1", 0): (0, 2)})
    broker = Broker(consumer, {})  # no answer for q[0]
    bands = BandSource(consumer, ["q"], 2, 0.5, Metrics(), refresh_s=0.0, ends=broker)
    tps = list(consumer.positions)
    assert bands.before_poll(tps, []).bands == {1}
    consumer.positions[("q.p1", 0)] = (2, 2)
    assert bands.before_poll(tps, []).bands == {0, 1}  # nothing known to wait: every band
    assert broker.asked == [[("q", 0)]]


def test_while_the_local_queue_is_full_higher_bands_that_look_empty_are_asked() -> None:
    """A full local queue fetches nothing until it drops below its threshold: a higher
    band's first record would wait for the next fetch of the lower bands' backlog. Its
    partitions that look empty are asked of the broker then (at most every
    `CROWDED_REFRESH_S`), the lowest band's never; with room in the queue, none."""
    consumer = CachedOnly({("q", 0): (5, 900), ("q.p1", 0): (3, 3), ("q.p2", 0): (0, 0)})
    broker = Broker(consumer, {("q.p1", 0): 3, ("q.p2", 0): 1})
    full = [False]
    bands = BandSource(
        consumer, ["q"], 3, 0.1, Metrics(), refresh_s=60.0, ends=broker, crowded=lambda: full[0]
    )
    tps = list(consumer.positions)
    assert bands.before_poll(tps, []).bands == {0, 1, 2}  # room in the queue: fetches tell
    assert broker.asked == []
    full[0] = True
    assert bands.before_poll(tps, []).bands == {2}  # q.p2 has a record its fetch has not seen
    assert broker.asked == [[("q.p1", 0), ("q.p2", 0)]]
    assert bands.paused == {("q", 0), ("q.p1", 0)}
    assert bands.before_poll(tps, []).bands == {2} and len(broker.asked) == 1  # not again yet


def test_a_higher_band_the_broker_does_not_answer_for_is_not_asked_again_at_once() -> None:
    """Each ask may hold the loop up to its timeout: one that got no answer waits
    `refresh_s`, even while the queue is full."""
    consumer = CachedOnly({("q", 0): (5, 900), ("q.p1", 0): (3, 3)})
    broker = Broker(consumer, {})  # away
    bands = BandSource(
        consumer, ["q"], 2, 0.1, Metrics(), refresh_s=60.0, ends=broker, crowded=lambda: True
    )
    tps = list(consumer.positions)
    for _ in range(3):
        assert bands.before_poll(tps, []).bands == {0, 1}
    assert broker.asked == [[("q.p1", 0)]]


class SlowBroker(Broker):
    """Answers the partitions in `answered`; each request takes `took` simulated seconds."""

    def __init__(self, consumer: Any, ends: dict[TP, int], answered: set[TP], took: float):
        super().__init__(consumer, ends)
        self.answered, self.took = answered, took

    def __call__(self, tps: Any) -> dict[TP, int]:
        wanted = list(tps)
        self.asked.append(wanted)
        CLOCK[0] += self.took
        return {tp: self.ends[tp] for tp in wanted if tp in self.answered}


CLOCK = [1_000.0]


@pytest.mark.parametrize(
    ("answered", "took", "most"),
    [
        ({("q.p1", 0)}, 2.0, 0.15),  # one leader away: each ask runs to its 2 s time-out
        ({("q.p1", 0), ("q.p1", 1)}, 0.3, 0.15),  # a slow broker
        ({("q.p1", 0), ("q.p1", 1)}, 0.001, 0.05),  # loopback
    ],
)
def test_asks_while_the_queue_is_full_hold_the_loop_a_small_share_of_its_time(
    monkeypatch: pytest.MonkeyPatch, answered: set[TP], took: float, most: float
) -> None:
    """(Found by a review: before, a leader away held the loop 2 s of every batch.)"""
    monkeypatch.setattr(bandsource.time, "monotonic", lambda: CLOCK[0])
    consumer = CachedOnly({("q", 0): (5, 10**9), ("q.p1", 0): (3, 3), ("q.p1", 1): (7, 7)})
    broker = SlowBroker(consumer, {("q.p1", 0): 3, ("q.p1", 1): 7}, answered, took)
    bands = BandSource(consumer, ["q"], 2, 0.1, Metrics(), ends=broker, crowded=lambda: True)
    tps = list(consumer.positions)
    start, held = CLOCK[0], 0.0
    while CLOCK[0] - start < 60:
        t0 = CLOCK[0]
        assert bands.before_poll(tps, []).bands == {0, 1}
        held += CLOCK[0] - t0
        CLOCK[0] += 0.02  # the batch
    assert broker.asked and held / (CLOCK[0] - start) <= most


# With every request timing out (2 s), the paused partition's asks and the band-2
# partition's (it never moves here: asked as stuck, `router.contract.bandends`) back off
# apart, each to one 2 s request per 32 s at most: 0.125 together.
@pytest.mark.parametrize(("took", "most"), [(2.0, 0.15), (0.3, 0.1), (0.001, 0.05)])
def test_asks_for_paused_partitions_hold_the_loop_a_small_share_of_its_time(
    monkeypatch: pytest.MonkeyPatch, took: float, most: float
) -> None:
    """A lower band paused behind a higher one's backlog, looking empty, its leader away
    (each request runs to its time-out, `took`; found by a review: before, a request
    stamped before it was made was due again as soon as it ended, and held the loop
    nearly all its time)."""
    monkeypatch.setattr(bandsource.time, "monotonic", lambda: CLOCK[0])
    consumer = CachedOnly({("q", 0): (5, 5), ("q.p1", 0): (0, 10**9)})
    broker = SlowBroker(consumer, {("q", 0): 5}, set(), took)  # q[0]: never answered
    bands = BandSource(consumer, ["q"], 2, 0.1, Metrics(), ends=broker)
    tps = list(consumer.positions)
    start, held = CLOCK[0], 0.0
    while CLOCK[0] - start < 300:
        t0 = CLOCK[0]
        assert bands.before_poll(tps, []).bands == {1}
        held += CLOCK[0] - t0
        CLOCK[0] += 0.02  # the batch
    assert len(broker.asked) >= 3 and held / (CLOCK[0] - start) <= most


def test_asks_for_where_partitions_start_hold_the_loop_a_small_share_of_its_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Partitions nothing was consumed of, whose committed offsets a coordinator away
    never gives (each request runs to its 2 s time-out)."""
    monkeypatch.setattr(bandsource.time, "monotonic", lambda: CLOCK[0])
    consumer = AwayCoordinator({("q", 0): (-1, 5), ("q.p1", 0): (0, 10**9)}, 2.0, CLOCK)
    bands = BandSource(consumer, ["q"], 2, 0.1, Metrics(), ends=Broker(consumer, {}))
    tps = list(consumer.positions)
    start, held = CLOCK[0], 0.0
    while CLOCK[0] - start < 300:
        t0 = CLOCK[0]
        bands.before_poll(tps, [])
        held += CLOCK[0] - t0
        CLOCK[0] += 0.02
    assert consumer.committed_calls >= 3 and held / (CLOCK[0] - start) <= 0.1


def test_a_higher_band_holding_an_open_transaction_stops_looking_backlogged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Band 2's partition holds a transaction left open (its producer killed mid-batch):
    its cached high watermark (11) is past everything the read_committed consumer can read
    (up to 7, the last stable offset). Before, band 2 took every turn but the minimum share
    until the transaction timed out, reading nothing, with band 0's backlog waiting."""
    monkeypatch.setattr(bandsource.time, "monotonic", lambda: CLOCK[0])
    consumer = CachedOnly({("q", 0): (5, 1000), ("q.p2", 0): (7, 11)})
    broker = Broker(consumer, {("q", 0): 1000, ("q.p2", 0): 7})  # last stable offsets
    bands = BandSource(consumer, ["q"], 3, 0.1, Metrics(), ends=broker)
    tps = list(consumer.positions)
    turns = []
    start = CLOCK[0]
    while CLOCK[0] - start < 5:
        turns.append((CLOCK[0] - start, bands.before_poll(tps, [])))
        CLOCK[0] += 0.02
    late = [t for at, t in turns if at >= 1.5]
    assert late and all(0 in t.bands and not t.share for t in late), late[:3]
    assert any(("q.p2", 0) in ask for ask in broker.asked)
    # the transaction commits: its records can be read, band 2 goes first again
    broker.ends[("q.p2", 0)] = 11
    while CLOCK[0] - start < 8:
        turn = bands.before_poll(tps, [])
        CLOCK[0] += 0.02
    assert turn.bands == {2}
    consumer.positions[("q.p2", 0)] = (11, 11)  # read
    assert bands.before_poll(tps, []).bands == {0, 1, 2}
