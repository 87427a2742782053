"""The short soak inside `make test` (the long one is `make soak`, 30 minutes).

Twenty-four seconds at a steady load on the session's private stack, under the default policy
`wait`, with a unit SIGKILLed and another frozen past its session and resumed; sampled every
2 s. Twenty-four seconds cannot show growth (the growth check's own tests, on synthetic series, are
tests/unit/ops/scenarios/test_soak_growth.py): this run shows that the samples are taken
(every family, each unit's RSS per slot), that the CSV and the plots are written, and that
the verdict is clean (nothing lost, duplicated, reordered or split, no interleaving).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ops.harness.scenarios.chaos_result import summary
from ops.harness.scenarios.soak_growth import family
from ops.harness.scenarios.soak_run import SoakSpec, run_soak
from ops.harness.stack.localstack import LocalStack
from router.config import RouterSettings

pytestmark = pytest.mark.slow


def test_short_soak_samples_plots_and_judges_clean(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path
) -> None:
    spec = SoakSpec(
        minutes=0.4,
        senders=2,
        rate=25.0,
        fault_every_s=8.0,
        pause_s=6.0,
        sample_s=2.0,
        seed=3,
        catch_up_s=120.0,
    )
    lines: list[str] = []
    result = run_soak(private_settings, private_stack, spec, tmp_path, say=lines.append)
    report = "\n".join(lines + summary(result.chaos) + [g.line() for g in result.growth])
    print(report)  # shown with pytest -rP
    r = result.chaos.report
    assert (r.lost, r.duplicated, r.reordered, r.split_groups, r.unexpected) == (0, 0, 0, 0, 0), (
        report
    )
    assert r.groups_complete == r.groups_sent > 0, report
    assert result.chaos.violations() == [], report  # interleavings, unexpected exits
    assert [what.split()[0] for _, what in result.faults] == ["SIGKILL", "SIGSTOP"], report
    assert result.chaos.pauses == 1, report
    # samples: every family, every role's slots
    assert result.samples >= 10, report
    assert result.csv is not None
    with result.csv.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == result.samples
    columns = set(rows[0])
    assert {family(c) for c in columns} >= {
        "t",
        "rss",
        "redis_memory",
        "redis_keys",
        "table",
        "topic",
        "lag",
    }, columns
    for slot in ("send-unit#1", "send-unit#2", "receive-unit#1", "receive-unit#3", "sweeper#1"):
        assert f"rss:{slot}" in columns, columns
    assert {"table:send:entries", "table:receive:writers", "table:send:owners"} <= columns
    assert all(float(row["rss:sweeper#1"]) > 10e6 for row in rows if row["rss:sweeper#1"])
    # one plot per family, each a PNG
    assert {p.name for p in result.plots} == {
        "soak-rss.png",
        "soak-redis-memory.png",
        "soak-redis-keys.png",
        "soak-table.png",
        "soak-topic.png",
        "soak-lag.png",
    }
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in result.plots)
    # the growth check ran over every judged family (not judged here: 24 s is too short)
    assert {family(g.name) for g in result.growth} >= {"rss", "redis_memory", "table", "lag"}
