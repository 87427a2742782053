"""The console's short memory: a ring of the figures it read at each refresh, so that its
plots have points over time, and the small statistics it needs (percentiles, increases
over a window). Pure: no I/O, no clock of its own (times are `time.monotonic()` values
passed in)."""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Values = dict[str, float | None]  # figure name -> value (None: unknown at that moment)

KEEP_S = 600.0  # points older than this are forgotten: the plots show the last 10 minutes
MIN_STEP_S = 1.0  # a refresh closer than this to the last point adds none (several tabs)
WINDOW_S = 300.0  # "in the last minutes": dead letters and expiries over the last 5 minutes


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank p-th percentile (0 < p <= 100) of `values`; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class History:
    """Points (monotonic time, figures), oldest first, at least `min_step_s` apart and
    none older than `keep_s` behind the newest."""

    keep_s: float = KEEP_S
    min_step_s: float = MIN_STEP_S
    points: deque[tuple[float, Values]] = field(default_factory=deque)

    def add(self, at: float, values: Values) -> bool:
        """Keep a point; False (and nothing kept) if the last one is under `min_step_s` old."""
        if self.points and at - self.points[-1][0] < self.min_step_s:
            return False
        self.points.append((at, dict(values)))
        while self.points and at - self.points[0][0] > self.keep_s:
            self.points.popleft()
        return True

    def series(self, names: Iterable[str], now: float) -> dict[str, list[list[float]]]:
        """Per figure, its known points as [seconds before `now` (negative), value]."""
        out: dict[str, list[list[float]]] = {}
        for name in names:
            out[name] = [
                [round(at - now, 1), float(v)]
                for at, vals in self.points
                if (v := vals.get(name)) is not None
            ]
        return out

    def increase(self, name: str, now: float, window_s: float = WINDOW_S) -> float | None:
        """How much a cumulative figure grew over the last `window_s` (over the points
        kept, if they span less): the sum of its rises between consecutive points, so a
        fall (a process gone, its counters with it) counts as nothing. None: fewer than two
        points with a value in the window."""
        values = [
            v
            for at, vals in self.points
            if now - at <= window_s and (v := vals.get(name)) is not None
        ]
        if len(values) < 2:
            return None
        return sum(max(0.0, b - a) for a, b in itertools.pairwise(values))

    def span(self, now: float, window_s: float = WINDOW_S) -> float:
        """Seconds the points kept cover within the last `window_s`."""
        inside = [at for at, _ in self.points if now - at <= window_s]
        return 0.0 if not inside else now - inside[0]
