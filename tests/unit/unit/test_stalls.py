"""Stranded partitions (router.unit.stalls): assigned, nothing read of them for long although
records wait, told from the broker's committed and stable offsets."""

from __future__ import annotations

import time

from router.metrics.registry import Metrics
from router.unit.bandsource import BandSource
from router.unit.stalls import MAX_SUSPECTS, StallGuard
from tests.fixtures.bands import FakeConsumer, FakeEnds

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def test_a_partition_is_a_suspect_only_after_the_delay_and_unless_paused() -> None:
    g = StallGuard(after_s=20.0)
    g.assigned([A, B, C], now=1.0)  # a fresh machine's clock: near zero
    assert g.suspects(now=20.9, skip=set()) == []
    assert g.suspects(now=21.0, skip={B}) == [A, C]  # B is kept paused by the unit
    g.took([C], now=21.0)  # something of C was consumed: it is read
    assert g.suspects(now=30.0, skip=set()) == [A, B]
    assert g.unconsumed == {A, B}
    assert g.suspects(now=41.0, skip=set()) == [A, B, C]  # C not read for after_s since


def test_a_partition_read_before_is_a_suspect_once_unread_for_the_delay() -> None:
    g = StallGuard(after_s=20.0)
    g.assigned([A], now=0.0)
    for t in range(0, 100, 5):  # read every 5 s: never a suspect
        g.took([A], now=float(t))
        assert g.suspects(now=float(t) + 19.9, skip=set()) == []
    assert g.suspects(now=95.0 + 20.0, skip=set()) == [A]
    # read before: its position (past what it read) against the stable offset
    assert g.judge([A], {A: 120}, {A: 0}, {A: 130}, now=115.0) == [A]


def test_records_waiting_past_where_a_read_starts_make_it_stranded() -> None:
    g = StallGuard(after_s=20.0, retry_s=5.0)
    g.assigned([A, B, C], now=0.0)
    suspects = g.suspects(now=20.0, skip=set())
    # A: committed 4, stable 9 (records wait); B: committed = stable (idle; a read
    # transaction's marker included); C: the broker did not answer for its stable offset
    lows = {A: 0, B: 0, C: 0}
    assert g.judge(suspects, {A: 4, B: 7, C: 0}, lows, {A: 9, B: 7}, now=20.0) == [A]
    assert g.suspects(now=24.9, skip=set()) == []
    assert g.suspects(now=25.0, skip=set()) == [C]  # asked about again soon
    assert g.suspects(now=40.0, skip=set()) == [A, B, C]  # the idle one after_s later


def test_an_unknown_start_or_a_negative_offset_is_no_verdict() -> None:
    g = StallGuard(after_s=1.0, retry_s=1.0)
    g.assigned([A, B], now=0.0)
    assert g.judge([A, B], {A: 0, B: 0}, {B: -1001}, {A: 5, B: 5}, now=1.0) == []
    assert g.suspects(now=2.0, skip=set()) == [A, B]


def test_assigning_again_starts_the_delay_over_and_a_revoked_one_is_forgotten() -> None:
    g = StallGuard(after_s=20.0)
    g.assigned([A, B], now=100.0)
    zero = {A: 0, B: 0}
    assert g.judge(g.suspects(now=121.0, skip=set()), zero, zero, {A: 1, B: 2}, 121.0) == [A, B]
    g.assigned([A], now=121.0)  # assigned again
    g.revoked([B])
    assert g.suspects(now=140.0, skip=set()) == []
    assert g.suspects(now=141.0, skip=set()) == [A]
    assert g.judge([A, B], zero, zero, {A: 1, B: 2}, 141.0) == [A]  # B is not ours now
    g.took([A], now=142.0)  # the fetcher started after all
    assert g.suspects(now=161.0, skip=set()) == []
    assert not g.unconsumed and list(g.due) == [A]


def test_a_turn_asks_about_a_bounded_number_of_suspects() -> None:
    g = StallGuard(after_s=1.0)
    many = [("t", p) for p in range(MAX_SUSPECTS + 10)]
    g.assigned(many, now=0.0)
    first = g.suspects(now=1.0, skip=set())
    assert len(first) == MAX_SUSPECTS
    three = {tp: 3 for tp in first}
    g.judge(first, three, three, three, now=1.0)  # idle
    assert len(g.suspects(now=1.0, skip=set())) == 10  # the rest, the next turn


def test_time_the_loop_spent_away_is_no_time_unread() -> None:
    g = StallGuard(after_s=20.0, gap_s=3.0)
    g.assigned([A, B], now=0.0)
    for t in range(0, 11):  # the loop looks every second
        g.tick(float(t))
    g.took([B], now=10.0)
    g.tick(55.0)  # a call blocked 45 s (or a back-off): nothing could be read meanwhile
    assert g.suspects(now=55.0, skip=set()) == []
    assert g.suspects(now=64.9, skip=set()) == []
    assert g.suspects(now=65.0, skip=set()) == [A]  # 20 s of the loop looking
    assert g.suspects(now=75.0, skip=set()) == [A, B]


def test_a_start_is_never_before_the_low_watermark() -> None:
    """Records deleted (delete-records, retention) before the committed offset was read:
    nothing waits, however far the committed offset lies behind (a partition with
    nothing after them was assigned again every `after_s`, for ever)."""
    g = StallGuard(after_s=20.0)
    g.assigned([A, B, C], now=0.0)
    # A: committed 2, deleted up to 5, nothing after; B: the same, then 3 new records;
    # C: nothing committed, never read (its start is the low watermark)
    lows, stable = {A: 5, B: 5, C: 4}, {A: 5, B: 8, C: 4}
    assert g.judge([A, B, C], {A: 2, B: 2}, lows, stable, now=20.0) == [B]
    assert g.suspects(now=39.9, skip=set()) == []


def test_a_turn_whose_poll_came_back_full_is_no_time_unread() -> None:
    """With a backlog, records a partition's fetcher fetched wait in the local queue behind
    the others' (a queue deeper than `after_s` of the unit's work): a partition assigned
    again then lost what it fetched and was queued last again, never read while the
    backlog lasted (seen on the real broker: one of four partitions read nothing in 25 s)."""
    g = StallGuard(after_s=20.0, gap_s=3.0)
    g.assigned([A, B], now=0.0)
    g.tick(0.0)
    t = 0.0
    for _ in range(60):  # a turn every 0.5 s, every poll full: 30 s of backlog
        t += 0.5
        g.tick(t, queued=True)
        g.took([A], now=t)
    assert g.suspects(now=t, skip=set()) == []  # B's records may be queued behind A's
    for _ in range(39):  # the queue runs dry: now B would have been read, were it fetched
        t += 0.5
        g.tick(t)
    assert g.suspects(now=t, skip=set()) == []
    g.tick(t + 0.5)
    # 20 s of turns that emptied the queue: B (and A, read last 20 s of them ago)
    assert g.suspects(now=t + 0.5, skip=set()) == [A, B]


def test_a_partition_resumed_after_a_long_pause_starts_its_delay_over() -> None:
    """Kept paused (a priority band passed over, a hold, a back-off) is no time unread: a
    partition resumed is not a suspect before its fetcher had `after_s` to read it."""
    g = StallGuard(after_s=20.0)
    g.assigned([A, B], now=1.0)
    assert g.suspects(now=100.0, skip={A}) == [B]  # A paused by the unit all along
    g.resumed([A], now=100.0)  # its band's turn
    assert g.suspects(now=100.0, skip=set()) == [B]
    assert g.suspects(now=119.9, skip=set()) == [B]
    assert g.suspects(now=120.0, skip=set()) == [A, B]
    g.resumed([B, C], now=120.0)  # C is not assigned: ignored
    g.took([A], now=121.0)
    assert g.suspects(now=139.9, skip=set()) == [] and list(g.due) == [A, B]


def test_a_band_resumed_for_its_turn_starts_its_delay_over() -> None:
    """The band source tells the guard which partitions it resumes: a lower band passed
    over for long (a higher band's backlog) and given its share turn is not a suspect at
    once, before its fetch could come back."""
    low, high = ("q", 0), ("q.p1", 0)
    consumer = FakeConsumer({low: (0, 0), high: (0, 50)})  # position, high watermark
    g = StallGuard(after_s=20.0)
    g.assigned([low, high], now=0.0)
    bands = BandSource(
        consumer, ["q"], 2, 0.5, Metrics(), refresh_s=0.0, stalls=g, ends=FakeEnds(consumer)
    )
    assert bands.before_poll([low, high], []).bands == {1}  # the low band is paused
    assert bands.paused == {low}
    consumer.positions[low] = (0, 3)  # records come in on the low band
    turns = [bands.before_poll([low, high], []) for _ in range(2)]
    assert [t.share for t in turns] == [False, True]  # the low band's share turn
    assert consumer.calls[-2:] == [("pause", ["q.p1"]), ("resume", ["q"])]
    assert g.due[low] >= time.monotonic() + 19.0  # from its resumption, not its assignment
    assert g.due[high] == 20.0  # paused now: skipped, as the band source says
    assert bands.paused == {high}
