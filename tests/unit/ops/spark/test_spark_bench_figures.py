"""`make spark-bench`'s figures, pure: micro-batches and their commit times from progress
reports, the steady rate, group latencies, which batch wrote which file, the rate
source's rows from a checkpoint, and the report's lines."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ops.harness.spark import bench_report as report
from ops.harness.spark import bench_stats as stats
from ops.harness.spark.bench_output import Completeness, Output, rate_rows


def _progress(batch: int, at: str, rows: int, trigger_ms: int) -> dict[str, object]:
    return {
        "batchId": batch,
        "timestamp": at,
        "numInputRows": rows,
        "durationMs": {"addBatch": trigger_ms - 10, "triggerExecution": trigger_ms},
    }


def test_batches_are_committed_when_their_trigger_ends_and_idle_reports_are_left_out() -> None:
    reports = [
        _progress(0, "2026-01-01T00:00:00.000Z", 10, 500),
        {
            "batchId": 1,
            "timestamp": "2026-01-01T00:00:01.000Z",
            "numInputRows": 0,
            "durationMs": {"triggerExecution": 3},
        },
        _progress(1, "2026-01-01T00:00:02.000Z", 20, 1_500),
        _progress(1, "2026-01-01T00:00:02.000Z", 21, 1_600),  # reported again: the last wins
    ]
    got = stats.batches(reports)
    t0 = stats.epoch_ms("2026-01-01T00:00:00.000Z")
    assert [(b.batch_id, b.committed_ms - t0, b.input_rows) for b in got] == [
        (0, 500, 10),
        (1, 3_600, 21),
    ]


def test_the_steady_rate_counts_the_batches_after_the_first_in_the_window() -> None:
    points = [(1_000, 50), (2_000, 100), (4_000, 300), (9_000, 999)]
    rate = stats.steady_rate(points, 1_000, 4_000)
    assert (rate.messages, rate.seconds, rate.batches) == (400, 3.0, 3)
    assert math.isclose(rate.per_second, 400 / 3)
    assert stats.steady_rate(points, 8_000, 9_500).per_second == 0.0  # one batch: no rate


def test_a_groups_latency_runs_from_its_last_member_to_its_batch_commit() -> None:
    groups = [(3, 1_000), (3, 1_500), (4, 4_000), (5, 20_000)]
    committed = {3: 2_000, 4: 6_500, 5: 21_000}
    assert stats.latencies_ms(groups, committed, 1_200, 10_000) == [500, 2_500]
    summary = stats.latency_summary([500, 2_500])
    assert (summary["groups"], summary["max_ms"]) == (2.0, 2_500)
    assert stats.goal_met(5_000, 4_999) and not stats.goal_met(4_999, 10)


def test_each_file_belongs_to_the_first_batch_whose_log_entry_lists_it(tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()

    def entry(*paths: str) -> str:
        return "v1\n" + "\n".join(json.dumps({"path": p, "action": "add"}) for p in paths)

    (log / "0").write_text(entry("file:/o/output=groups/a.parquet"))
    (log / "1.compact").write_text(entry("file:/o/output=groups/a.parquet", "file:/o/b.parquet"))
    (log / ".1.compact.crc").write_text("")
    assert stats.batch_of_files(stats.read_sink_log(log)) == {"a.parquet": 0, "b.parquet": 1}


def test_the_rate_sources_rows_come_from_the_last_committed_offset(tmp_path: Path) -> None:
    for name in ("offsets", "commits"):
        (tmp_path / name).mkdir()
    for batch, second in ((0, 0), (1, 4), (2, 9)):
        (tmp_path / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{second}\n')
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    (tmp_path / "commits" / "1").write_text("v1\n{}\n")  # batch 2 never committed
    assert rate_rows(tmp_path, 300) == 4 * 300
    for commit in (tmp_path / "commits").iterdir():
        commit.unlink()
    assert rate_rows(tmp_path, 300) == 0  # nothing committed: nothing generated


def test_the_report_says_whether_the_goal_was_met_and_what_was_missing() -> None:
    complete = Completeness(100, 350, 50, 349, 1, 0, 0, 49)
    got = Output(groups=[(1, 0)], messages_per_batch={1: 349}, rows={"groups": 49})
    progress = [_progress(1, "1970-01-01T00:00:00.000Z", 10, 500)]
    result = report.figures(progress, [], got, complete, (0, 1))
    result.update(date="2026-01-01", spec={"rate": 5000, "max_lines": 40, "seconds": 150,
                                           "warmup_s": 75}, failures=[])  # fmt: skip
    assert not result["complete"] and not result["goal_met"]
    line = report.verdict(result)
    assert "not met" in line and "OUTPUT INCOMPLETE" in line
    rows = {r[0]: r for r in report.table_rows(result)}
    assert rows["messages received / generated"][2].startswith("missing 1")
    # Beside the goal, the figure before issue 31 at the nearest load.
    before_p99 = stats.before_for(result["offered_msg_s"])[1]
    assert rows["before (2026-11-25/28)"][1] == f"{before_p99:,.0f} ms"
    assert line.endswith(f"before (2026-11-25/28): p99 {before_p99:,.0f} ms; OUTPUT INCOMPLETE")
    assert stats.before_for(5_379) == (5_121.0, 38_200.0)
    assert stats.before_for(2_500) == (2_508.0, 11_500.0)
    assert "## micro-batch sender, 5,000 msg/s offered" in report.markdown([result])
    assert line.startswith("RESULT spark-bench micro-batch sender, offered")
    # The real-time sender's table names the query that read the rate source.
    result["spec"]["sender"] = "real-time"
    result["sender_profile_ms"] = {"triggerExecution": 900.0, "addBatch": 600.0}
    rows = {r[0]: r for r in report.table_rows(result)}
    assert "upstream writer batch (mean ms)" in rows and "sender batch (mean ms)" not in rows
    assert report.verdict(result).startswith("RESULT spark-bench real-time sender")
