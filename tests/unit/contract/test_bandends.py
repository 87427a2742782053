"""Where a band partition ends for a read_committed reader (`router.contract.bandends`):
the high watermark, capped by the last stable offset the broker gave while the reader has
not read past it; a partition that looks backlogged at a position that does not move is
asked again. The units' and the `Receiver`'s band sources under an open transaction are in
tests/unit/unit/test_band_watermarks.py and tests/unit/receiver/test_band_asks.py."""

from __future__ import annotations

from router.contract.bandends import BandEnds

TP = ("q.p2", 0)


def test_without_an_answer_the_end_is_the_highest_watermark_seen() -> None:
    marks = BandEnds(1.0)
    assert marks.end(TP, 5) == -1
    marks.seen(TP, 9)
    marks.seen(TP, 7)  # an older fetch response: a watermark never goes back
    assert marks.end(TP, 5) == 9


def test_an_open_transaction_caps_the_end_until_the_reader_reads_past_it() -> None:
    marks = BandEnds(1.0)
    marks.seen(TP, 11)  # 4 records of a transaction still open after offset 7
    marks.answered(TP, 7, now=10.0)  # its last stable offset
    assert marks.end(TP, 7) == 7  # nothing to read
    assert marks.end(TP, 5) == 7  # 2 records before it can be
    marks.seen(TP, 12)  # aborted: its marker; the reader skips to 12
    assert marks.end(TP, 12) == 12 and TP not in marks.stable


def test_an_answer_past_the_cached_watermark_raises_it() -> None:
    marks = BandEnds(1.0)
    marks.seen(TP, 5)
    marks.answered(TP, 9, now=0.0)  # a paused partition: nothing fetched since 5
    assert marks.end(TP, 5) == 9


def test_a_position_that_does_not_move_under_a_backlog_is_asked_every_interval() -> None:
    marks = BandEnds(1.0)
    marks.seen(TP, 11)
    assert not marks.stuck(TP, 7, now=0.0)  # first seen there
    assert not marks.stuck(TP, 7, now=0.9)
    assert marks.stuck(TP, 7, now=1.0)
    marks.answered(TP, 7, now=1.0)
    assert not marks.stuck(TP, 7, now=1.5)  # answered half a second ago
    assert marks.stuck(TP, 7, now=2.0)  # still there: the transaction may have ended
    assert not marks.stuck(TP, 8, now=2.1)  # it moved: read from
    assert not marks.stuck(TP, 8, now=2.9)
    assert not marks.stuck(TP, 11, now=5.0)  # caught up: nothing to ask


def test_a_fresh_machine_clock_near_zero_is_not_taken_for_long_ago() -> None:
    marks = BandEnds(1.0)
    marks.seen(TP, 3)
    assert not marks.stuck(TP, 1, now=0.001)  # time.monotonic() just after boot
    assert marks.stuck(TP, 1, now=1.01)


def test_forget_starts_afresh() -> None:
    marks = BandEnds(1.0)
    marks.seen(TP, 11)
    marks.answered(TP, 7, now=0.0)
    marks.forget(TP)
    assert marks.end(TP, 7) == -1 and TP not in marks.stable
