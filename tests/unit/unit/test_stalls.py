"""Stranded partitions (router.unit.stalls): assigned, nothing read of them for long although
records wait, told from the broker's committed and stable offsets."""

from __future__ import annotations

from router.unit.stalls import MAX_SUSPECTS, StallGuard

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
    assert g.judge([A], {A: 120}, {A: 130}, now=115.0) == [A]


def test_records_waiting_past_where_a_read_starts_make_it_stranded() -> None:
    g = StallGuard(after_s=20.0, retry_s=5.0)
    g.assigned([A, B, C], now=0.0)
    suspects = g.suspects(now=20.0, skip=set())
    # A: committed 4, stable 9 (records wait); B: committed = stable (idle; a read
    # transaction's marker included); C: the broker did not answer for its stable offset
    assert g.judge(suspects, {A: 4, B: 7, C: 0}, {A: 9, B: 7}, now=20.0) == [A]
    assert g.suspects(now=24.9, skip=set()) == []
    assert g.suspects(now=25.0, skip=set()) == [C]  # asked about again soon
    assert g.suspects(now=40.0, skip=set()) == [A, B, C]  # the idle one after_s later


def test_an_unknown_start_or_a_negative_offset_is_no_verdict() -> None:
    g = StallGuard(after_s=1.0, retry_s=1.0)
    g.assigned([A, B], now=0.0)
    assert g.judge([A, B], {B: -1001}, {A: 5, B: 5}, now=1.0) == []
    assert g.suspects(now=2.0, skip=set()) == [A, B]


def test_assigning_again_starts_the_delay_over_and_a_revoked_one_is_forgotten() -> None:
    g = StallGuard(after_s=20.0)
    g.assigned([A, B], now=100.0)
    assert g.judge(g.suspects(now=121.0, skip=set()), {A: 0, B: 0}, {A: 1, B: 2}, 121.0) == [
        A,
        B,
    ]
    g.assigned([A], now=121.0)  # assigned again
    g.revoked([B])
    assert g.suspects(now=140.0, skip=set()) == []
    assert g.suspects(now=141.0, skip=set()) == [A]
    assert g.judge([A, B], {A: 0, B: 0}, {A: 1, B: 2}, 141.0) == [A]  # B is not ours now
    g.took([A], now=142.0)  # the fetcher started after all
    assert g.suspects(now=161.0, skip=set()) == []
    assert not g.unconsumed and list(g.due) == [A]


def test_a_turn_asks_about_a_bounded_number_of_suspects() -> None:
    g = StallGuard(after_s=1.0)
    many = [("t", p) for p in range(MAX_SUSPECTS + 10)]
    g.assigned(many, now=0.0)
    first = g.suspects(now=1.0, skip=set())
    assert len(first) == MAX_SUSPECTS
    g.judge(first, {tp: 3 for tp in first}, {tp: 3 for tp in first}, now=1.0)  # idle
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
