"""The Receiver's priority bands ask the broker for what librdkafka cannot say (a paused
partition's end, where a partition nothing was read of starts) from the application's own
poll: each request holds it until answered or timed out. A broker or a coordinator away
must hold the poll a small share of its time (`router.receiver.bandlag`, paced like the
units' `router.unit.bandsource`). Pure logic: a simulated clock, in-memory consumers."""

from __future__ import annotations

from typing import Any

import pytest

from router.receiver import bandlag
from router.receiver.bands import ReceiverBands
from tests.fixtures.bands import AwayCoordinator, FakeConsumer, FakeEnds

TP = tuple[str, int]
CLOCK = [5_000.0]


class AwayEnds(FakeEnds):
    """A broker whose requests take `took` simulated seconds and leave out `away`."""

    def __init__(self, consumer: Any, away: set[TP], took: float) -> None:
        super().__init__(consumer)
        self.away, self.took = away, took

    def __call__(self, tps: Any) -> dict[TP, int]:
        got = super().__call__(tps)
        CLOCK[0] += self.took
        return {tp: end for tp, end in got.items() if tp not in self.away}


def held_share(bands: ReceiverBands) -> float:
    """The share of 300 simulated seconds spent in `before_poll`, a batch taking 20 ms."""
    start, held = CLOCK[0], 0.0
    while CLOCK[0] - start < 300:
        t0 = CLOCK[0]
        bands.before_poll()
        held += CLOCK[0] - t0
        CLOCK[0] += 0.02
    return held / (CLOCK[0] - start)


# With every request timing out (2 s), the paused partition's asks and the band-2
# partition's (it never moves here: asked as stuck, `router.contract.bandends`) back off
# apart, each to one 2 s request per 32 s at most: 0.125 together.
@pytest.mark.parametrize(("took", "most"), [(2.0, 0.15), (0.3, 0.1), (0.001, 0.05)])
def test_a_paused_band_whose_leader_is_away_holds_the_poll_a_small_share_of_its_time(
    monkeypatch: pytest.MonkeyPatch, took: float, most: float
) -> None:
    """Band 0 paused behind band 2's backlog and looking empty, its end never answered
    (before: asked every second, each request running to its time-out)."""
    monkeypatch.setattr(bandlag.time, "monotonic", lambda: CLOCK[0])
    c = FakeConsumer({("q", 0): (5, 5), ("q.p2", 0): (0, 10**9)})
    ends = AwayEnds(c, {("q", 0)}, took)
    bands = ReceiverBands(c, ["q"], 3, ends=ends)
    assert held_share(bands) <= most
    # band 2's partition is asked too: its position never moves here (nothing is read),
    # which is how a transaction left open looks (router.contract.bandends)
    assert sum(("q", 0) in ask for ask in ends.asked) >= 3


def test_partitions_whose_coordinator_is_away_hold_the_poll_a_small_share_of_its_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing read yet of two partitions, their committed offsets never answered (before:
    asked once per partition at every poll, each request running to its 5 s time-out)."""
    monkeypatch.setattr(bandlag.time, "monotonic", lambda: CLOCK[0])
    c = AwayCoordinator({("q", 0): (-1, 5), ("q.p1", 0): (-1, 7), ("q.p2", 0): (0, 10)}, 5.0, CLOCK)
    bands = ReceiverBands(c, ["q"], 3, ends=FakeEnds(c))
    assert held_share(bands) <= 0.1
    assert c.committed_calls >= 3


class StableEnds(FakeEnds):
    """The broker's last stable offsets (`stable`), behind the cached high watermarks of a
    partition holding a transaction left open."""

    def __init__(self, consumer: Any, stable: dict[TP, int]) -> None:
        super().__init__(consumer)
        self.stable = stable

    def __call__(self, tps: Any) -> dict[TP, int]:
        got = super().__call__(tps)
        return {tp: self.stable.get(tp, end) for tp, end in got.items()}


def test_a_higher_band_holding_an_open_transaction_stops_looking_backlogged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Band 2 of the queue holds a transaction left open (its high watermark 11, its last
    stable offset 7, where the reader stands): before, it looked backlogged until the
    transaction ended, and band 0's backlog was read only in minimum-share turns."""
    monkeypatch.setattr(bandlag.time, "monotonic", lambda: CLOCK[0])
    c = FakeConsumer({("q", 0): (5, 1000), ("q.p2", 0): (7, 11)})
    ends = StableEnds(c, {("q.p2", 0): 7})
    bands = ReceiverBands(c, ["q"], 3, ends=ends)
    start = CLOCK[0]
    paused_late: list[set[TP]] = []
    while CLOCK[0] - start < 5:
        bands.before_poll()
        if CLOCK[0] - start >= 1.5:
            paused_late.append(set(bands.paused))
        CLOCK[0] += 0.02
    assert paused_late and all(("q", 0) not in p for p in paused_late)
    assert bands.lag[("q.p2", 0)] == 0 and bands.lag[("q", 0)] == 995
    ends.stable[("q.p2", 0)] = 11  # committed: band 2 goes first again (but for band 0's share)
    paused_late.clear()
    while CLOCK[0] - start < 8:
        bands.before_poll()
        if CLOCK[0] - start >= 7:
            paused_late.append(set(bands.paused))
        CLOCK[0] += 0.02
    assert bands.lag[("q.p2", 0)] == 4
    assert sum(("q", 0) in p for p in paused_late) > 0.8 * len(paused_late)
