"""Following one streaming query's progress (Spark's listener bus): what it read, what it
dropped, and how often a micro-batch took longer than its trigger interval."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

log = logging.getLogger("spark_jobs.streaming")
_progress_log = logging.getLogger("spark_jobs.progress")


class Progress(StreamingQueryListener):  # type: ignore[misc]
    """Follows one query's progress: logs each micro-batch's progress as JSON (logger
    `spark_jobs.progress`, DEBUG), and counts the batches, the input rows, the rows its
    watermark dropped (`numRowsDroppedByWatermark` of its stateful operators) and the
    copies its deduplication dropped (`numDroppedDuplicateRows`), each drop logged as a
    warning: nothing is dropped silently. A batch that took longer than `trigger_ms` is
    counted (`behind`, the slowest in `worst`) for one summary line (`behind_summary`),
    where Spark would warn once per batch ("Current batch is falling behind")."""

    def __init__(self, name: str, trigger_ms: float = 0.0) -> None:
        self.name = name
        self.trigger_ms = trigger_ms
        self.query_id: str | None = None
        self.batches = 0
        self.first_batch: int | None = None
        self.last_batch: int | None = None
        self.input_rows = 0
        self.dropped_by_watermark = 0
        self.duplicates_dropped = 0
        self.behind = 0
        self.worst: tuple[int, int] | None = None  # (batch ID, milliseconds)
        self.terminated = threading.Event()
        self.observed: Counter[str] = Counter()  # sums of the query's observe() metrics

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        if str(p.id) != self.query_id:
            return
        self.batches += 1
        if self.first_batch is None:
            self.first_batch = p.batchId
        self.last_batch = p.batchId
        self.input_rows += p.numInputRows
        took = int((p.durationMs or {}).get("triggerExecution", 0))
        if self.trigger_ms and took > self.trigger_ms:
            self.behind += 1
            if self.worst is None or took > self.worst[1]:
                self.worst = (p.batchId, took)
        dropped = sum(op.numRowsDroppedByWatermark for op in p.stateOperators)
        if dropped:
            self.dropped_by_watermark += dropped
            log.warning(
                "%s: batch %d: %d rows older than the watermark dropped (%d so far)",
                self.name,
                p.batchId,
                dropped,
                self.dropped_by_watermark,
            )
        copies = sum(
            int((op.customMetrics or {}).get("numDroppedDuplicateRows", 0))
            for op in p.stateOperators
        )
        if copies:
            self.duplicates_dropped += copies
            log.warning(
                "%s: batch %d: %d copies of ordinary records already received dropped (%d so far)",
                self.name,
                p.batchId,
                copies,
                self.duplicates_dropped,
            )
        for row in (p.observedMetrics or {}).values():
            self.observed.update({k: v for k, v in row.asDict().items() if v})
        _progress_log.debug("%s", p.json)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if str(event.id) == self.query_id:
            self.terminated.set()

    def finished(self) -> str:
        """The batches this run finished, in words."""
        if self.first_batch is None or self.last_batch is None:
            return "finished no batch"
        if self.batches == 1:
            return f"finished batch {self.last_batch} ({self.input_rows} input rows)"
        return (
            f"finished batches {self.first_batch}-{self.last_batch} ({self.batches} batches, "
            f"{self.input_rows} input rows)"
        )

    def behind_summary(self) -> str | None:
        """One line for the batches slower than the trigger, or None if none was."""
        if not self.behind or self.worst is None:
            return None
        return (
            f"{self.name}: {self.behind} of {self.batches} batches took longer than the "
            f"{self.trigger_ms / 1000:g} s trigger interval (slowest: batch {self.worst[0]}, "
            f"{self.worst[1] / 1000:.1f} s); Spark's per-batch 'falling behind' warnings are "
            "not logged"
        )
