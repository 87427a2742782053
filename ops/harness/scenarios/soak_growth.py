"""The soak's growth check (pure: no I/O): does a series grow once the load is steady?

A series is the samples of one quantity over the run, (seconds since the start, value).
The first `warmup` share of the judged window is dropped (topics fill, processes import and
warm their caches, tables reach their working size); of what is left, the median of the
first third is compared with the median of the last third. Medians, not the ends: every
minute a fault (a unit killed, a unit frozen) throws a spike into lag, into entries and into
a process's memory, and a spike at either end must not decide. A least-squares slope per
hour is reported beside it, never judged.

A series grows past its `Bound` when the last third's median exceeds the first third's by
more than max(`absolute`, `relative` x the first third's median): the absolute part keeps a
quantity near zero (lag, a hash of 3 fields) from failing on noise, the relative part
scales with a quantity's level. The bounds of `make soak` (`BOUNDS`) and why each is what
it is are in docs/reference/make.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

Point = tuple[float, float]  # (seconds since the start, value)

MIB = 1024 * 1024


@dataclass(frozen=True)
class Bound:
    absolute: float  # in the series' unit
    relative: float  # of the first third's median
    judged: bool = True  # False: reported, never fails the run (topic sizes)

    def allowed(self, level: float) -> float:
        return max(self.absolute, self.relative * abs(level))


# A family of series (the name's prefix, up to the first ':') -> its bound.
BOUNDS: dict[str, Bound] = {
    # A Python unit's RSS: allocator arenas and librdkafka's buffers move by megabytes
    # with the traffic; a leak of one object per message would add far more than 30 MiB
    # over the run (hundreds of thousands of messages).
    "rss": Bound(30 * MIB, 0.20),
    # Redis used_memory: a few MiB of tables; client buffers and the allocator move it.
    "redis_memory": Bound(8 * MIB, 0.25),
    # Keys: tables of two sides, the processes' metrics hashes (expire 30 s after a death).
    "redis_keys": Bound(10, 0.10),
    # A table's hash, zset, list or set: entries, writers, owners, done, room, parks, ...
    "table": Bound(10, 0.20),
    # A consumer group's lag: ten seconds of the run's traffic (set by `bounds_for`).
    "lag": Bound(0, 0.50),
    # Topic sizes grow by design (retention): reported, per message, never judged.
    "topic": Bound(0, 0, judged=False),
}


def bounds_for(rate_total: float) -> dict[str, Bound]:
    """BOUNDS with the lag's absolute bound: ten seconds of `rate_total` messages/s."""
    return {**BOUNDS, "lag": Bound(10 * rate_total, BOUNDS["lag"].relative)}


@dataclass(frozen=True)
class Growth:
    name: str
    samples: int  # in the steady window
    first: float  # median of its first third
    last: float  # median of its last third
    allowed: float  # growth allowed: max(absolute, relative x first)
    slope_per_h: float  # least-squares slope over the steady window, per hour
    judged: bool

    @property
    def growth(self) -> float:
        return self.last - self.first

    @property
    def fails(self) -> bool:
        return self.judged and self.growth > self.allowed

    def line(self) -> str:
        verdict = "FAIL" if self.fails else ("ok" if self.judged else "reported")
        return (
            f"{self.name}: {_fmt(self.name, self.first)} -> {_fmt(self.name, self.last)} "
            f"(growth {_fmt(self.name, self.growth)}, allowed {_fmt(self.name, self.allowed)}, "
            f"slope {_fmt(self.name, self.slope_per_h)}/h over {self.samples} samples) {verdict}"
        )


def steady(points: Sequence[Point], start: float, end: float, warmup: float) -> list[Point]:
    """The points of [start, end] after its first `warmup` share."""
    begin = start + warmup * (end - start)
    return [(t, v) for t, v in points if begin <= t <= end]


def judge(name: str, points: Sequence[Point], bound: Bound, min_samples: int = 6) -> Growth | None:
    """The growth of one series over its (already steady) points; None if too few to say."""
    if len(points) < min_samples:
        return None
    ordered = sorted(points)
    third = len(ordered) // 3
    first = statistics.median(v for _, v in ordered[:third])
    last = statistics.median(v for _, v in ordered[-third:])
    return Growth(
        name,
        len(ordered),
        first,
        last,
        bound.allowed(first),
        slope(ordered) * 3600,
        bound.judged,
    )


def slope(points: Sequence[Point]) -> float:
    """Least-squares slope (value per second); 0 for fewer than two distinct times."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in points) / den


def family(name: str) -> str:
    return name.split(":", 1)[0]


def judge_all(
    series: dict[str, list[Point]],
    bounds: dict[str, Bound],
    start: float,
    end: float,
    warmup: float = 0.2,
) -> list[Growth]:
    """Every series with a bound for its family, over [start, end] after the warm-up."""
    out = []
    for name in sorted(series):
        bound = bounds.get(family(name))
        if bound is None:
            continue
        g = judge(name, steady(series[name], start, end, warmup), bound)
        if g is not None:
            out.append(g)
    return out


def longest_life(points: Sequence[tuple[float, float, int]]) -> list[Point]:
    """Of a slot's RSS samples (t, value, pid), those of the process that was sampled most
    often: a restarted process starts small, and a slot's series across a restart says
    nothing about growth."""
    by_pid: dict[int, list[Point]] = {}
    for t, v, pid in points:
        by_pid.setdefault(pid, []).append((t, v))
    if not by_pid:
        return []
    return max(by_pid.values(), key=len)


def judge_rss(
    slots: dict[str, list[tuple[float, float, int]]],
    bound: Bound,
    start: float,
    end: float,
    warmup: float = 0.2,
) -> list[Growth]:
    """Each slot's longest-lived process over the steady window; judged only if that
    process was sampled over at least 80 % of it (the slots the faults kill are reported)."""
    out = []
    begin = start + warmup * (end - start)
    for name in sorted(slots):
        points = longest_life([(t, v, pid) for t, v, pid in slots[name] if begin <= t <= end])
        if not points:
            continue
        span = max(t for t, _ in points) - min(t for t, _ in points)
        whole = span >= 0.8 * (end - begin)
        g = judge(name, points, bound if whole else Bound(0, 0, judged=False))
        if g is not None:
            out.append(g)
    return out


def _fmt(name: str, value: float) -> str:
    if family(name) in ("rss", "redis_memory"):
        return f"{value / MIB:.1f} MiB"
    return f"{value:.0f}" if abs(value) >= 10 or value == int(value) else f"{value:.2f}"
