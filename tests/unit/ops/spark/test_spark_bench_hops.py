"""The Spark benchmark's per-hop split of a group's latency (`bench_hops`), pure."""

from __future__ import annotations

import math

import pytest

from ops.harness.spark import bench_hops as hops
from ops.harness.spark import bench_report as report
from ops.harness.spark import bench_stats as stats
from ops.harness.spark.bench_output import Completeness, Output


def test_each_hop_is_the_time_between_the_finals_times_on_two_topics() -> None:
    # created, sent, transferred, received, committed
    finals = [(1_000, 1_400, 1_450, 1_500, 3_000), (2_000, 2_100, 2_300, 2_310, 2_900)]
    figures = hops.hop_figures(finals)
    # nearest rank of two values: p50 and p99 are the larger
    assert figures["sender"]["p50_ms"] == 400 and figures["send unit"]["p99_ms"] == 200
    assert figures["receive unit"]["p99_ms"] == 50
    assert figures["receiver"]["p99_ms"] == 1_500
    assert figures["whole"]["p99_ms"] == 2_000 and figures["whole"]["groups"] == 2


def test_only_groups_created_in_the_window_count() -> None:
    finals = [(1_000, 1_100, 1_200, 1_300, 1_400), (5_000, 5_100, 5_200, 5_300, 9_000)]
    figures = hops.hop_figures(finals, since_ms=2_000, until_ms=6_000)
    assert figures["whole"]["groups"] == 1 and figures["receiver"]["p50_ms"] == 3_700
    empty = hops.hop_figures(finals, since_ms=10_000)
    assert empty["whole"]["groups"] == 0 and math.isnan(empty["whole"]["p99_ms"])


def test_a_group_without_every_time_is_refused_or_counted_as_lacking() -> None:
    with pytest.raises(ValueError, match="needs 5 times"):
        hops.hop_figures([(1, 2, 3)])
    rows, lacking = hops.join_times(
        {"a": 1, "b": 1}, {"a": 2, "b": 2}, {"a": 3}, {"a": 4, "b": 4}, {"a": 5, "b": 6, "c": 7}
    )
    assert rows == [(1, 2, 3, 4, 5)] and lacking == 2


def test_the_report_prints_each_hop_and_the_goal_of_its_load() -> None:
    complete = Completeness(10, 3, 1, 3, 0, 0, 0, 1)
    got = Output(
        groups=[(1, 1_000)], batch_of_group={"g": 1}, messages_per_batch={1: 3}, rows={"groups": 1}
    )
    progress = [
        {"batchId": 1, "timestamp": "1970-01-01T00:00:02.000Z", "numInputRows": 3,
         "durationMs": {"addBatch": 400, "triggerExecution": 500}},
    ]  # fmt: skip
    finals = {
        "send": {"g": (1_200, 1_000)},
        "transfer": {"g": (1_300, 1_000)},
        "receive": {"g": (1_900, 1_000)},
    }
    result = report.figures(progress, [], got, complete, (0, 10_000), finals, rate=2_500)
    whole = result["hops"]["hops"]["whole"]
    assert whole["p99_ms"] == 2_500 - 1_000 and result["hops"]["lacking"] == 0
    assert result["goal"] == {"rate_msg_s": 0.95 * 2_500, "p99_ms": 3_000}
    rows = {r[0]: r for r in report.table_rows(result)}
    assert rows["hop: receiver p50 / p99"][1] == "600 / 600 ms"
    assert rows["hop: sender p50 / p99"][1] == "200 / 200 ms"


def test_the_goal_depends_on_the_load_offered() -> None:
    assert stats.goal_for(5_000) == (5_000, 10_000)
    assert stats.goal_for(None) == (5_000, 10_000)
    assert stats.goal_for(2_500) == (0.95 * 2_500, 3_000)
    assert stats.goal_met(2_400, 2_900, 2_500) and not stats.goal_met(2_400, 3_100, 2_500)
    assert not stats.goal_met(4_900, 9_000, 5_000) and stats.goal_met(5_100, 9_000, 5_000)
