"""Following one streaming query's progress (Spark's listener bus): what it read, what it
dropped, and how often a micro-batch took longer than its trigger interval.

`listen(spark, on_progress, on_terminated)` hands each progress report to `on_progress` as
the JSON dict Spark writes (`StreamingQueryProgress.json`). In a classic session it
registers its own listener with the JVM (PySpark's `PythonStreamingQueryListenerWrapper`)
that asks for each report's JSON in one call. PySpark's own listener builds a Python event
from the JVM's, a call per field, and resolves a JVM class by name for each observed
metric: a lookup that scans every jar on the class path. With one listener per query,
each receiving every query's events, that was a seventh of the driver JVM's CPU in
`make spark-bench` (JFR, 2026-11-30). Under Spark Connect the events come as JSON already,
through PySpark's listener.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql.streaming import StreamingQueryListener

from spark_jobs.session import is_connect

log = logging.getLogger("spark_jobs.streaming")
_progress_log = logging.getLogger("spark_jobs.progress")

Report = dict[str, Any]  # one progress report: StreamingQueryProgress's JSON


class _JsonCalls:
    """Spark's `PythonStreamingQueryListener`, implemented here through Py4J: each event's
    progress as its JSON, one call into the JVM."""

    def __init__(self, on_progress: Callable[[Report], None], on_terminated: Callable[[str], None]):
        self.on_progress = on_progress
        self.on_terminated = on_terminated

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self.on_progress(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        self.on_terminated(jevent.id().toString())

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class _ConnectCalls(StreamingQueryListener):  # type: ignore[misc]
    """The same calls from PySpark's listener (Spark Connect: events arrive as JSON)."""

    def __init__(self, on_progress: Callable[[Report], None], on_terminated: Callable[[str], None]):
        self.on_progress = on_progress
        self.on_terminated = on_terminated

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self.on_progress(json.loads(event.progress.json))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self.on_terminated(str(event.id))


def listen(
    spark: Any,
    on_progress: Callable[[Report], None],
    on_terminated: Callable[[str], None] = lambda _query_id: None,
) -> Any:
    """Call `on_progress` with every progress report of every query of the session, and
    `on_terminated` with the ID of each query that ends; returns what `unlisten` takes.
    The calls come on Spark's listener thread, one event at a time."""
    if is_connect(spark):
        listener = _ConnectCalls(on_progress, on_terminated)
        spark.streams.addListener(listener)
        return listener
    ensure_callback_server_started(spark.sparkContext._gateway)
    jvm = spark.sparkContext._jvm
    wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
    jlistener = wrapper(_JsonCalls(on_progress, on_terminated))
    spark._jsparkSession.streams().addListener(jlistener)
    return jlistener


def unlisten(spark: Any, handle: Any) -> None:
    """Stop the calls `listen` started."""
    if isinstance(handle, StreamingQueryListener):
        spark.streams.removeListener(handle)
    else:
        spark._jsparkSession.streams().removeListener(handle)


class Progress:
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
        # Events that came before `follow` named the query (its first batch can end before
        # `start()` returns its ID): kept, and counted once the query is known.
        self._lock = threading.RLock()  # reports come on Spark's listener thread
        self._early: list[Report] = []
        self._early_ended: set[str] = set()

    def follow(self, query_id: str) -> None:
        """Follow the query with this ID, counting what it reported before."""
        with self._lock:
            self.query_id = query_id
            early, self._early = self._early, []
            for p in early:
                self.report(p)
            if query_id in self._early_ended:
                self.terminated.set()
            self._early_ended.clear()

    def report(self, p: Report) -> None:
        """One progress report (of any query: the others are ignored)."""
        with self._lock:
            if self.query_id is None:
                self._early.append(p)
            elif p.get("id") == self.query_id:
                self._count(p)

    def _count(self, p: Report) -> None:
        batch = int(p["batchId"])
        self.batches += 1
        if self.first_batch is None:
            self.first_batch = batch
        self.last_batch = batch
        self.input_rows += int(p.get("numInputRows") or 0)
        took = int((p.get("durationMs") or {}).get("triggerExecution", 0))
        if self.trigger_ms and took > self.trigger_ms:
            self.behind += 1
            if self.worst is None or took > self.worst[1]:
                self.worst = (batch, took)
        operators = p.get("stateOperators") or []
        dropped = sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in operators)
        if dropped:
            self.dropped_by_watermark += dropped
            log.warning(
                "%s: batch %d: %d rows older than the watermark dropped (%d so far)",
                self.name,
                batch,
                dropped,
                self.dropped_by_watermark,
            )
        copies = sum(
            int((op.get("customMetrics") or {}).get("numDroppedDuplicateRows", 0))
            for op in operators
        )
        if copies:
            self.duplicates_dropped += copies
            log.warning(
                "%s: batch %d: %d copies of ordinary records already received dropped (%d so far)",
                self.name,
                batch,
                copies,
                self.duplicates_dropped,
            )
        for row in (p.get("observedMetrics") or {}).values():
            self.observed.update({k: v for k, v in row.items() if v})
        if _progress_log.isEnabledFor(logging.DEBUG):
            _progress_log.debug("%s", json.dumps(p))

    def ended(self, query_id: str) -> None:
        """A query ended (the one followed, or another)."""
        with self._lock:
            if self.query_id is None:
                self._early_ended.add(query_id)
                return
        if query_id == self.query_id:
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
