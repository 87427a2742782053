"""Running a streaming query so that stopping and restarting it is clean.

The receiver writes through Spark's file sink (`FileSink`), which is exactly once for
its readers however the query stops: a batch repeated after a crash is committed in the
sink's log once. The sender writes each micro-batch through `foreachBatch`
(`BatchSink`). What a restart from the checkpoint does depends on where the query stopped:

* between micro-batches: the next run starts with the next batch. Nothing is lost, nothing
  is written twice.
* inside a micro-batch (its offsets logged, its commit not): the next run repeats that
  batch with the same input (Spark's offset log) and the same batch timestamp.

With `foreachBatch`, `StreamJob.stop()` always stops between micro-batches: it writes a
stop marker under the checkpoint (`<checkpoint>/stop/<run>`, through Spark, so on any
file system the query's own process can read), and the sink refuses to start writing a
batch once its run's marker exists (the batch fails before it wrote anything and is
repeated, whole, by the next run); `stop()` waits until no trigger is active, so the
batch being written has finished and is committed, and then stops the query (unless that
batch outlasts `stop`'s timeout, 120 s by default: then it stops inside it, with a
warning, and the batch is repeated after a restart). Nothing of
this lives in a driver-side Python object, so it works the same when the `foreachBatch`
function runs in a Spark Connect server's Python worker. A job killed with SIGKILL, or a
driver that dies, can still stop inside a batch: see README ("Spark jobs").
"""

from __future__ import annotations

import logging
import re
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql.streaming import StreamingQueryListener

from spark_jobs.session import is_connect

log = logging.getLogger("spark_jobs.streaming")
_progress_log = logging.getLogger("spark_jobs.progress")

Writer = Callable[[Any, int], None]


class StopRequested(RuntimeError):
    """Raised inside foreachBatch to refuse a batch once the job is stopping."""

    MARKER = "router-spark-stop-requested"

    def __init__(self, batch_id: int) -> None:
        super().__init__(f"{self.MARKER}: batch {batch_id} not started, it runs after a restart")


def exists(spark: Any, path: str) -> bool:
    """Whether `path` exists, on any file system Spark reaches (local, HDFS, S3...): asked
    of the Hadoop file system in a classic session; from a Spark Connect client, which has
    no JVM of its own, asked of Spark (planning a read of the path lists it, its glob
    characters escaped)."""
    if not is_connect(spark):
        jvm = spark.sparkContext._jvm
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        return bool(fs.exists(hadoop_path))
    literal = re.sub(r"([\\*?\[\]{}])", r"\\\1", path)
    try:
        spark.read.format("text").load(literal).schema  # noqa: B018 - analysed, not run
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            return False
        raise
    return True


class BatchSink:
    """The `foreachBatch` function: writes one micro-batch at a time, and refuses to start
    one once `stop_marker` exists (checked through the batch's own session: no state of
    the driver, so it runs where Spark Connect runs it). `last_written` is the last batch
    it wrote, seen by a classic session's driver only."""

    def __init__(self, write: Writer, stop_marker: str) -> None:
        self._write = write
        self.stop_marker = stop_marker
        self.last_written = -1

    def __call__(self, df: Any, batch_id: int) -> None:
        if exists(df.sparkSession, self.stop_marker):
            log.info("batch %d refused: stopping; it runs after a restart", batch_id)
            raise StopRequested(batch_id)
        self._write(df, batch_id)
        self.last_written = batch_id


# Who reports a refused or interrupted batch as an error, with its stack trace: Spark's
# micro-batch loop (the query "terminated with error"), the scheduler and broadcasts of a
# batch being planned when the query stops, and py4j (an exception in a Python callback).
_REFUSAL_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
    # A file sink's batch interrupted by the stop (repeated, and committed once, later).
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.scheduler.DAGScheduler",
    "org.apache.spark.broadcast.TorrentBroadcast",
)


@contextmanager
def _quiet_refusals(spark: Any) -> Iterator[None]:
    """While stopping, a refused batch is expected: keep its stack traces out of the log.
    (A real failure still ends the job with exit 1 and is logged by `run_until_signalled`.)"""
    if is_connect(spark):  # the server's log: not ours to set
        yield
        return
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    configurator = log4j.core.config.Configurator
    previous = {name: log4j.LogManager.getLogger(name).getLevel() for name in _REFUSAL_LOGGERS}
    py4j_log = logging.getLogger("py4j.clientserver")
    py4j_level = py4j_log.level
    for name in _REFUSAL_LOGGERS:
        configurator.setLevel(name, log4j.Level.OFF)
    py4j_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, level in previous.items():
            configurator.setLevel(name, level)
        py4j_log.setLevel(py4j_level)


class Progress(StreamingQueryListener):  # type: ignore[misc]
    """Follows one query's progress (Spark's listener bus): logs each micro-batch's
    progress as JSON (logger `spark_jobs.progress`, DEBUG), and counts the input rows,
    the rows its watermark dropped (`numRowsDroppedByWatermark` of its stateful
    operators) and the copies its deduplication dropped (`numDroppedDuplicateRows`),
    each drop logged as a warning: nothing is dropped silently."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.query_id: str | None = None
        self.input_rows = 0
        self.dropped_by_watermark = 0
        self.duplicates_dropped = 0
        self.terminated = threading.Event()
        self.observed: Counter[str] = Counter()  # sums of the query's observe() metrics

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        if str(p.id) != self.query_id:
            return
        self.input_rows += p.numInputRows
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


@dataclass(frozen=True)
class FileSink:
    """Spark's file sink: `path` (any Hadoop path), its format and partition columns."""

    path: str
    format: str = "parquet"
    partition_by: tuple[str, ...] = ()


class StreamJob:
    """A streaming query into `write` (a foreachBatch function) or a `FileSink`."""

    def __init__(
        self,
        spark: Any,
        name: str,
        df: Any,
        write: Writer | FileSink,
        checkpoint: str,
        trigger_seconds: float,
    ) -> None:
        self.spark = spark
        self.name = name
        self.checkpoint = checkpoint.rstrip("/")
        self.writer = write
        self.file_sink = write if isinstance(write, FileSink) else None
        # Each run its own stop marker: one left by an earlier run never stops this one.
        self.stop_marker = f"{self.checkpoint}/stop/{secrets.token_hex(8)}"
        self.sink = BatchSink(write, self.stop_marker) if self.file_sink is None else None
        self._df = df
        self._trigger = f"{trigger_seconds} seconds"
        self.query: Any = None
        self.progress = Progress(name)

    @property
    def dropped_by_watermark(self) -> int:
        """Input rows this run's stateful step dropped as older than the watermark."""
        return self.progress.dropped_by_watermark

    @property
    def duplicates_dropped(self) -> int:
        """Copies of ordinary records this run's deduplication dropped (see
        `api.complete_groups`)."""
        return self.progress.duplicates_dropped

    @property
    def accounted(self) -> int:
        """Messages this run accounted for: in an output row (the observed `messages`), or
        counted as dropped (older than the watermark, or an ordinary record's copy)."""
        return self.metric("messages") + self.dropped_by_watermark + self.duplicates_dropped

    def metric(self, name: str) -> int:
        """The sum of observed metric `name` over this run's micro-batches."""
        return self.progress.observed[name]

    def start(self) -> StreamJob:
        self.spark.streams.addListener(self.progress)
        writer = self._df.writeStream.queryName(self.name)
        if self.file_sink is not None:
            writer = (
                writer.format(self.file_sink.format)
                .outputMode("append")
                .option("path", self.file_sink.path)
                .partitionBy(*self.file_sink.partition_by)
            )
        else:
            writer = writer.foreachBatch(self.sink)
        self.query = (
            writer.option("checkpointLocation", self.checkpoint)
            .trigger(processingTime=self._trigger)
            .start()
        )
        self.progress.query_id = str(self.query.id)
        log.info("%s started (checkpoint %s)", self.name, self.checkpoint)
        return self

    @property
    def active(self) -> bool:
        return bool(self.query is not None and self.query.isActive)

    def failure(self) -> str | None:
        """Why the query ended, if it failed (a refused batch during stop is no failure)."""
        if self.query is None:
            return None
        exc = self.query.exception()
        if exc is None or StopRequested.MARKER in str(exc):
            return None
        return str(exc)

    def stop(self, timeout: float = 120.0) -> None:
        """Stop between micro-batches (foreachBatch: see the module's docstring), or at
        once (a file sink: a batch it interrupts is repeated by the next run and committed
        once). A foreachBatch batch still running after `timeout` is stopped inside, with
        a warning: Spark's stop interrupts it (and may itself wait for its tasks)."""
        if self.query is None:
            return
        with _quiet_refusals(self.spark):
            if self.sink is not None and self.active:
                self.spark.createDataFrame([(self.name,)], "stopping STRING").write.mode(
                    "overwrite"
                ).text(self.stop_marker)
                deadline = time.monotonic() + timeout
                while self.active and self.query.status["isTriggerActive"]:
                    if time.monotonic() > deadline:
                        log.warning(
                            "%s: a batch still runs after %.0f s: stopping inside it; it is "
                            "repeated after a restart (what it already wrote to Kafka is "
                            "sent again)",
                            self.name,
                            timeout,
                        )
                        break
                    time.sleep(0.05)  # polling the query's status for the batch's end
            self.query.stop()
        # The listener bus delivers the last progress before the termination event.
        if not self.progress.terminated.wait(30):
            log.warning("%s: no termination event from Spark within 30 s", self.name)
        self.spark.streams.removeListener(self.progress)
        if self.progress.dropped_by_watermark:
            log.warning(
                "%s: %d rows were older than the watermark and dropped",
                self.name,
                self.progress.dropped_by_watermark,
            )
        log.info("%s stopped", self.name)

    def run_until_signalled(self, stop_file: str | None = None) -> int:
        """Run until SIGTERM/SIGINT or until `stop_file` exists (then stop cleanly, exit 0),
        or until the query fails (exit 1)."""
        stop = threading.Event()

        def request(signum: int, _frame: Any) -> None:
            log.info(
                "%s: %s, stopping between micro-batches", self.name, signal.Signals(signum).name
            )
            stop.set()

        signal.signal(signal.SIGTERM, request)
        signal.signal(signal.SIGINT, request)
        while self.active and not stop.wait(1.0):
            if stop_file and exists(self.spark, stop_file):
                log.info("%s: %s exists, stopping between micro-batches", self.name, stop_file)
                break
        self.stop()
        failure = self.failure()
        if failure:
            log.error("%s failed: %s", self.name, failure)
            return 1
        return 0
