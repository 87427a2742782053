"""Periodic work on the monotonic clock, without a made-up "long ago".

`time.monotonic()` counts from an unspecified point, on Linux the machine's boot: on a
machine that booted a minute ago it reads about 60. A timestamp initialised to 0.0 is
therefore *not* long ago there, and "refresh if now - last >= interval" skips the first
refresh. `Every` has no such value: it is due at once the first time, then at most once
per interval.
"""

from __future__ import annotations

import time


class Every:
    """Due the first time it is asked, then at most once per `interval` seconds."""

    __slots__ = ("_last", "interval")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: float | None = None

    def due(self, now: float | None = None) -> bool:
        """True (and the interval restarts) if it never ran or `interval` has passed."""
        if now is None:
            now = time.monotonic()
        if self._last is not None and now - self._last < self.interval:
            return False
        self._last = now
        return True

    def reset(self) -> None:
        """Make it due again at once."""
        self._last = None


# A request's pacing by default (`Pacer`): the next one at least this many times its
# duration after it ended; after unanswered ones, a wait doubling up to this.
SPACING = 20.0
MAX_BACKOFF_S = 30.0


class Pacer:
    """Requests to a server made from a loop that waits on them (a watermark asked of the
    broker, say), spaced so that a slow or absent server holds the loop a small share of its
    time. Due at once the first time. After a request that was answered, due again
    `interval` after it ended, or `spacing` times as long as it took, whichever is later;
    after one that was not (a time-out, an error, a partition left out), the wait starts at
    `backoff_s` and doubles with each unanswered one up to `max_backoff_s` (still at least
    `spacing` times the request's duration): a leader away that makes each request run to
    its time-out costs the loop one time-out per back-off, not one per pass."""

    __slots__ = ("_backoff", "_due", "backoff_s", "interval", "max_backoff_s", "spacing")

    def __init__(
        self,
        interval: float,
        *,
        spacing: float | None = None,
        backoff_s: float = 1.0,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        """`spacing`: `SPACING` unless given (read when made)."""
        self.interval = interval
        self.spacing = SPACING if spacing is None else spacing
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._backoff = 0.0  # the last wait after an unanswered request (0: answered)
        self._due: float | None = None

    def due(self, now: float | None = None) -> bool:
        """Whether the next request may be made now (it is not recorded: `done` is)."""
        if self._due is None:
            return True
        return (time.monotonic() if now is None else now) >= self._due

    def done(self, began: float, ended: float, answered: bool) -> None:
        """A request ran from `began` to `ended` (time.monotonic()); `answered`: it said
        everything it was asked."""
        if answered:
            self._backoff = 0.0
            wait = self.interval
        else:
            self._backoff = min(max(2 * self._backoff, self.backoff_s), self.max_backoff_s)
            wait = self._backoff
        self._due = ended + max(wait, self.spacing * (ended - began))

    def reset(self) -> None:
        """Due again at once (the server changed, say)."""
        self._backoff = 0.0
        self._due = None
