"""Closed intervals of whole milliseconds (pure): the occupancies and decision windows of
the capacity rule (`ops.harness.verdict.capacity`). An interval [start, end] holds both
ends; a list of them (`Intervals`) is kept sorted, disjoint and non-adjacent."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

FOREVER = 1 << 62  # the end of an occupancy whose final never arrived

Intervals = list[tuple[int, int]]  # sorted, disjoint, non-adjacent closed [start, end]


def merge(intervals: Iterable[tuple[int, int]]) -> Intervals:
    """Union of closed integer intervals; touching ones ([1, 5] and [6, 9]) join."""
    out: Intervals = []
    for s, e in sorted(i for i in intervals if i[0] <= i[1]):
        if out and s <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(e, out[-1][1]))
        else:
            out.append((s, e))
    return out


def intersect(a: Intervals, b: Intervals) -> Intervals:
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s <= e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def meets(cover: Intervals, lo: int, hi: int) -> bool:
    """Whether some instant of [lo, hi] is in `cover`."""
    i = bisect.bisect_left(cover, lo, key=lambda iv: iv[1])
    return i < len(cover) and cover[i][0] <= hi


def gaps(cover: Intervals, lo: int, hi: int) -> Intervals:
    """The parts of [lo, hi] not in `cover`."""
    out: Intervals = []
    at = lo
    for s, e in cover[bisect.bisect_left(cover, lo, key=lambda iv: iv[1]) :]:
        if s > hi:
            break
        if s > at:
            out.append((at, s - 1))
        at = max(at, e + 1)
    if at <= hi:
        out.append((at, hi))
    return out
