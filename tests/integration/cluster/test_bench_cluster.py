"""Issue 30's row of `make bench`, short (in `make test`, about 12 s): grouped traffic through
both sides with the tables on the 3-primary Redis Cluster (the session's, rather than one of
the stage's own), for 1 cell (its tables on one primary, then on two) and 3 cells. Figures
are not asserted; that every run moved every message, put the tables where it chose, read
every primary and reported the per-node figures and the 3-cell share is (one round here;
`make bench` runs `cluster.ROUNDS` and reports the median of their ratios)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.harness.benchmark.cellcost import one_primary, spread, two_primaries
from ops.harness.benchmark.cluster import run_cluster, slot_ranges
from ops.harness.benchmark.model import PATH, BenchSpec
from ops.harness.benchmark.report import summary
from ops.harness.benchmark.runner import Bench
from ops.harness.stack.rediscluster import ClusterSet
from router.config import RouterSettings

pytestmark = pytest.mark.slow


def test_the_bench_row_on_the_redis_cluster(
    whole_cluster: ClusterSet, base_settings: RouterSettings, tmp_path: Path
) -> None:
    lines: list[str] = []
    spec = BenchSpec(min_messages=3_000, max_messages=3_000, java=False)
    bench = Bench(base_settings, spec, tmp_path, out=lines.append)
    try:
        run_cluster(bench, whole_cluster, rounds=1)  # make bench: cluster.ROUNDS
    finally:
        bench.cleanup()
    runs = bench.results.cluster
    assert [r.label for r in runs] == [
        "1 cell, on one primary",
        "1 cell, on two primaries",
        "3 cells",
    ]
    primaries = {port for *_, port in slot_ranges(whole_cluster)}
    for r, want in zip(runs, (one_primary, two_primaries, spread), strict=True):
        assert want(r.placement) and set(r.placement.values()) <= primaries, r.placement
        assert set(r.used) == primaries and r.messages == 3_000
        # every primary holding a table ran its scripts; the others none
        ran = {p for p, c in r.used.items() if c.script_us > 0}
        assert ran == set(r.placement.values()), (r.label, ran)
        assert r.peak_us > 0 and r.busiest in ran
    rows = [t for t in bench.results.throughput if t.stage.startswith(PATH + ", Redis Cluster")]
    assert len(rows) == 3 and all(t.messages_in >= 2 * 3_000 for t in rows), rows
    out = summary(bench.results)
    assert sum(x.startswith("Redis Cluster, ") for x in out) == 5, out
    assert any("3 cells / 1 cell, on one primary" in x and "goal <= 0.4" in x for x in out)
