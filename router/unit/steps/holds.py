"""Waiting, as plain bookkeeping (no I/O): held source partitions and the back-off.

Held partitions (busy policy "hold"): a message the table answered HELD stops its
partition at that offset: the unit pauses the partition, rewinds it to the held message
and retries after `hold_retry_ms`. The time a message was first held is kept across
retries, so that it can be shared once it has waited `hold_timeout_ms`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from router.unit.steps.batch import TP, Batch


@dataclass(slots=True)
class Hold:
    offset: int
    since: float  # time.monotonic() it was first held
    resume_at: float | None  # when to retry; None once resumed (the retry is under way)


class Holds:
    def __init__(self, retry_s: float, timeout_s: float) -> None:
        self.retry_s = retry_s
        self.timeout_s = timeout_s
        self._holds: dict[TP, Hold] = {}

    def __bool__(self) -> bool:
        return bool(self._holds)

    def timed_out(self, tp: TP, offset: int, now: float) -> bool:
        """True if this very message has been held for `timeout_s` (it is then shared)."""
        hold = self._holds.get(tp)
        return hold is not None and hold.offset == offset and now - hold.since >= self.timeout_s

    def settle(self, batch: Batch, now: float) -> list[tuple[TP, int]]:
        """After a batch completed: forget the holds it got through, record the new ones.
        Returns the (partition, offset) pairs to pause and rewind."""
        holds = self._holds
        if holds:
            for tp, last in batch.last.items():
                hold = holds.get(tp)
                if hold is not None and tp not in batch.held_at and hold.offset <= last:
                    del holds[tp]  # the held message got through
        out = []
        for tp, offset in batch.held_at.items():
            previous = holds.get(tp)
            since = previous.since if previous and previous.offset == offset else now
            holds[tp] = Hold(offset, since, now + self.retry_s)
            out.append((tp, offset))
        return out

    def due(self, now: float) -> list[TP]:
        """Held partitions whose retry time has come; they count as resumed from now."""
        due = []
        for tp, hold in self._holds.items():
            if hold.resume_at is not None and hold.resume_at <= now:
                hold.resume_at = None
                due.append(tp)
        return due

    def waiting(self) -> set[TP]:
        """Partitions that stay paused until their retry time."""
        return {tp for tp, h in self._holds.items() if h.resume_at is not None}

    def forget(self, tp: TP) -> None:
        self._holds.pop(tp, None)


class Backoff:
    """Exponential back-off while Redis or the broker is unavailable. `until` (monotonic
    time) is None while not backing off."""

    def __init__(self, initial_ms: int, max_ms: int) -> None:
        self.initial_ms, self.max_ms = initial_ms, max_ms
        self.ms = 0
        self.until: float | None = None

    def start(self) -> int:
        self.ms = min(max(self.ms * 2, self.initial_ms), self.max_ms)
        self.until = time.monotonic() + self.ms / 1000
        return self.ms

    def extend(self) -> None:
        self.until = time.monotonic() + self.ms / 1000
