"""What `Progress` makes of a query's progress events (pure: events built by hand): the
batches it finished, and one summary of the batches slower than the trigger interval
instead of Spark's warning per batch."""

from __future__ import annotations

from typing import Any

from spark_jobs.progress import Progress


def _event(batch_id: int, took_ms: int, rows: int = 10, query: str = "q") -> dict[str, Any]:
    """A progress report as Spark writes it (`StreamingQueryProgress.json`), in part."""
    return {
        "id": query,
        "batchId": batch_id,
        "numInputRows": rows,
        "durationMs": {"triggerExecution": took_ms},
        "stateOperators": [],
        "observedMetrics": {},
    }


def test_slow_batches_are_counted_and_the_slowest_named() -> None:
    progress = Progress("sender", trigger_ms=1000)
    progress.follow("q")
    for batch_id, took in ((4, 900), (5, 2500), (6, 4100), (7, 1000), (8, 1300)):
        progress.report(_event(batch_id, took))
    progress.report(_event(9, 9000, query="another query"))
    assert progress.behind == 3
    assert progress.worst == (6, 4100)
    assert progress.finished() == "finished batches 4-8 (5 batches, 50 input rows)"
    assert progress.behind_summary() == (
        "sender: 3 of 5 batches took longer than the 1 s trigger interval (slowest: batch 6, "
        "4.1 s); Spark's per-batch 'falling behind' warnings are not logged"
    )


def test_a_run_that_kept_up_has_no_summary() -> None:
    progress = Progress("receiver", trigger_ms=500)
    assert progress.finished() == "finished no batch"
    progress.follow("q")
    progress.report(_event(0, 120, rows=3))
    assert progress.behind_summary() is None
    assert progress.finished() == "finished batch 0 (3 input rows)"


def test_drops_and_observed_metrics_are_summed_from_the_report() -> None:
    progress = Progress("receiver")
    progress.follow("q")
    for batch_id in (0, 1):
        report = _event(batch_id, 100)
        report["stateOperators"] = [
            {"numRowsDroppedByWatermark": 2, "customMetrics": {}},
            {"numRowsDroppedByWatermark": 0, "customMetrics": {"numDroppedDuplicateRows": 3}},
        ]
        report["observedMetrics"] = {"out": {"messages": 7, "groups": 0}}
        progress.report(report)
    assert progress.dropped_by_watermark == 4
    assert progress.duplicates_dropped == 6
    assert progress.observed == {"messages": 14}
    progress.ended("another query")
    assert not progress.terminated.is_set()
    progress.ended("q")
    assert progress.terminated.is_set()


def test_reports_and_the_end_that_come_before_the_query_is_known_are_counted_once() -> None:
    progress = Progress("receiver")
    progress.report(_event(0, 100, rows=4))  # the first batch ended before start() returned
    progress.report(_event(5, 100, query="another query"))
    progress.ended("q")
    assert progress.batches == 0 and not progress.terminated.is_set()
    progress.follow("q")
    assert progress.finished() == "finished batch 0 (4 input rows)"
    assert progress.terminated.is_set()
    progress.report(_event(1, 100, rows=6))
    assert progress.finished() == "finished batches 0-1 (2 batches, 10 input rows)"
