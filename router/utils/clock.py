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
