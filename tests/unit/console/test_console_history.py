"""The console's history ring and percentiles (`router.console.history`)."""

from __future__ import annotations

import pytest

from router.console.history import History, percentile


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([4.0], 99) == 4.0
    values = [float(v) for v in range(1, 101)]  # 1..100, in any order
    assert percentile(values[::-1], 50) == 50.0
    assert percentile(values, 90) == 90.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_points_are_kept_apart_and_forgotten_when_old() -> None:
    h = History(keep_s=10.0, min_step_s=1.0)
    assert h.add(100.0, {"x": 1.0})
    assert not h.add(100.5, {"x": 2.0})  # a second tab's refresh: no new point
    for t in range(101, 115):
        assert h.add(float(t), {"x": float(t), "y": None})
    assert [at for at, _ in h.points] == [float(t) for t in range(104, 115)]
    s = h.series(["x", "y", "z"], now=115.0)
    assert s["x"][0] == [-11.0, 104.0] and s["x"][-1] == [-1.0, 114.0]
    assert s["y"] == [] and s["z"] == []  # unknown values are no points


def test_increase_counts_rises_only_within_the_window() -> None:
    h = History(keep_s=600.0, min_step_s=1.0)
    assert h.increase("dl", now=0.0) is None
    for at, v in [(0.0, 5.0), (10.0, 7.0), (20.0, 3.0), (30.0, 4.0), (40.0, 9.0)]:
        h.add(at, {"dl": v})
    # +2, a process gone (-4: nothing), +1, +5
    assert h.increase("dl", now=40.0) == pytest.approx(8.0)
    assert h.increase("dl", now=40.0, window_s=15.0) == pytest.approx(5.0)  # 30 and 40 only
    assert h.increase("dl", now=40.0, window_s=5.0) is None  # one point: unknown
    assert h.span(40.0) == 40.0 and h.span(40.0, window_s=15.0) == 10.0
