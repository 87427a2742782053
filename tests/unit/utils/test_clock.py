"""Periodic work on a fresh machine's clock (`time.monotonic()` near zero after boot)."""

from __future__ import annotations

import logging

from router.backends.kafka import clients
from router.utils.clock import Every


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
