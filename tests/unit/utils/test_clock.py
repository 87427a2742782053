"""Periodic work on a fresh machine's clock (`time.monotonic()` near zero after boot)."""

from __future__ import annotations

import logging

from router.backends.kafka import clients
from router.utils.clock import Every, Pacer


def test_every_is_due_at_once_on_a_clock_that_just_booted() -> None:
    every = Every(3600)
    assert every.due(now=0.5)  # one hour is longer than the machine has been up
    assert not every.due(now=10.0)
    assert every.due(now=3600.5)
    every.reset()
    assert every.due(now=3600.6)


def test_the_librdkafka_log_filter_lets_the_first_line_through_after_boot() -> None:
    # A clock of its own: patching time.monotonic would freeze every thread of the process.
    now = [2.0]
    f = clients.RepeatFilter(every=10.0, clock=lambda: now[0])

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("x", logging.WARNING, __file__, 1, msg, None, None)

    assert f.filter(record("Connect to 127.0.0.1:9092 failed"))
    assert not f.filter(record("Connect to 127.0.0.1:9093 failed"))  # same, numbers aside
    now[0] = 12.5
    again = record("Connect to 127.0.0.1:9092 failed")
    assert f.filter(again)
    assert "[1 similar lines suppressed]" in again.getMessage()


def test_a_pacer_spaces_requests_by_their_duration_and_backs_off_when_unanswered() -> None:
    pacer = Pacer(0.05, spacing=20, backoff_s=1.0, max_backoff_s=30.0)
    assert pacer.due(now=0.5)  # at once on a clock that just booted
    pacer.done(0.5, 0.501, answered=True)
    assert not pacer.due(now=0.55) and pacer.due(now=0.551)  # the interval after it ended
    pacer.done(1.0, 1.3, answered=True)  # a slow answer: 20 times 0.3 s
    assert not pacer.due(now=7.29) and pacer.due(now=7.31)
    waits = []
    t = 10.0
    for _ in range(7):  # a leader away: each request runs to a 2 s time-out
        pacer.done(t, t + 2.0, answered=False)
        nxt = t + 2.0
        while not pacer.due(now=nxt):
            nxt += 0.5
        waits.append(nxt - (t + 2.0))
        t = nxt
    assert waits == [40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0]  # 20 times its 2 s
    pacer.done(t, t + 0.01, answered=False)  # quick refusals: the back-off doubles on
    assert not pacer.due(now=t + 0.01 + 29.9) and pacer.due(now=t + 0.01 + 30.0)  # to its max
    pacer.done(100.0, 100.001, answered=True)
    assert pacer.due(now=100.051)  # one answer ends the back-off
    pacer.reset()
    assert pacer.due(now=100.0)


def test_a_pacer_backs_off_from_its_first_wait_doubling() -> None:
    pacer = Pacer(0.0, spacing=0, backoff_s=1.0, max_backoff_s=8.0)
    waits = []
    t = 5.0
    for _ in range(5):
        pacer.done(t, t, answered=False)
        nxt = t
        while not pacer.due(now=nxt):
            nxt += 0.25
        waits.append(nxt - t)
        t = nxt
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0]
