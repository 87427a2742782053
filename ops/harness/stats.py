"""Percentiles for every driver's figures (pure): the demo's and the burst's latencies,
the benchmark's latencies and traces, the priority stage, the Spark benchmark."""

from __future__ import annotations

from collections.abc import Iterable


def percentile(values: Iterable[float], q: float, *, empty: float = float("nan")) -> float:
    """The q-quantile (0 <= q <= 1) of `values` by nearest rank, in their own unit;
    `empty` if there are none (nan by default: no figure; the benchmark's tables show 0)."""
    ordered = sorted(values)
    if not ordered:
        return empty
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
