"""Stopping a streaming query cleanly: what the sink and the driver do around a stop.

`streaming.StreamJob.stop()` writes a stop marker under the checkpoint
(`<checkpoint>/stop/<run>`, through Spark, so on any file system the query's own process
can read), and `BatchSink`, the `foreachBatch` function, writes nothing once its run's
marker `exists`. A batch that starts after the marker is parked, not failed (`park`): in
a classic session the sink waits in an interruptible JVM call on the query's own thread
until `stop()` interrupts it, which Spark takes for the stop it is (SPARK-39218: no
error, no stack trace, the query ends without an exception; `StopInterrupted`); the
batch's offsets are logged, its commit is not, so the next run repeats it whole with the
same input. Under Spark Connect the sink runs in the server's Python worker, which has no
JVM of ours to wait in: it refuses the batch by raising `StopRequested` (the server logs
it; `StreamJob.failure()` does not count it). Nothing of this lives in a driver-side
Python object the sink needs, so it works the same when the `foreachBatch` function runs
in a Spark Connect server's Python worker.

Around the stop, the driver keeps the expected interruptions out of the log:
`hide_stop_tracebacks` (py4j's log of a parked batch's `StopRequested`),
`quiet_interrupts` (Spark's and Hadoop's stack traces of a batch the stop interrupts)
and `wait_for_tasks` (a stopped query's killed tasks log while it holds).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException

from spark_jobs.session import is_connect

# The stop's lines belong to the job's log (`streaming`), as `progress`'s do.
log = logging.getLogger("spark_jobs.streaming")

Writer = Callable[[Any, int], None]


class StopRequested(RuntimeError):
    """Raised inside foreachBatch to refuse a batch once the job is stopping."""

    MARKER = "router-spark-stop-requested"

    def __init__(self, batch_id: int) -> None:
        super().__init__(f"{self.MARKER}: batch {batch_id} not started, it runs after a restart")


class StopInterrupted(StopRequested):
    """Raised by the sink once `query.stop()` interrupted its JVM call (a parked batch's
    wait, or the check for the stop marker). Its message holds the words by which Spark
    recognises a py4j call interrupted by the stop (`StreamExecution.PROXY_ERROR`,
    SPARK-39218), and is short on purpose: Spark matches that pattern against the whole
    traceback text with a backtracking regex, which overflows the query thread's stack on
    a traceback of a few kilobytes (a Java stack trace, or a chained exception)."""

    def __init__(self, batch_id: int) -> None:
        RuntimeError.__init__(
            self,
            f"{self.MARKER}: batch {batch_id} not started, it runs after a restart "
            "(py4j.protocol.Py4JJavaError: An error occurred while calling the JVM: "
            "java.lang.InterruptedException, the query's stop)",
        )


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
    """The `foreachBatch` function: writes one micro-batch at a time, and writes none once
    `stop_marker` exists (checked through the batch's own session: no state of the driver,
    so it runs where Spark Connect runs it): such a batch is parked until the query stops
    (`park`), or refused under Spark Connect. `last_written` is the last batch it wrote,
    `parked` the batch it parked, both seen by a classic session's driver only."""

    def __init__(self, write: Writer, stop_marker: str, park_seconds: float = 600.0) -> None:
        self._write = write
        self.stop_marker = stop_marker
        self.park_seconds = park_seconds
        self.last_written = -1
        self.parked: int | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            stopping = exists(df.sparkSession, self.stop_marker)
        except Py4JJavaError as exc:  # the stop met the check itself
            if not _interrupted(exc):
                raise
            raise StopInterrupted(batch_id) from None
        if stopping:
            if is_connect(df.sparkSession):
                log.info("batch %d refused: stopping; it runs after a restart", batch_id)
                raise StopRequested(batch_id)
            self.park(df, batch_id)
        self._write(df, batch_id)
        self.last_written = batch_id

    def park(self, df: Any, batch_id: int) -> None:
        """Write nothing and wait, on the query's own thread (py4j's pinned threads run a
        callback's calls there), in an interruptible JVM sleep until `StreamJob.stop()`
        stops the query: Spark takes the interrupted call for the stop it is
        (`StopInterrupted`). After `park_seconds` with no stop it refuses the batch as
        under Spark Connect (`StopRequested`: the query ends with it as its exception)."""
        self.parked = batch_id
        thread = df.sparkSession.sparkContext._jvm.java.lang.Thread
        deadline = time.monotonic() + self.park_seconds
        try:
            while time.monotonic() < deadline:
                thread.sleep(200)  # interrupted by query.stop(); not a poll of ours
        except Py4JJavaError as exc:
            if not _interrupted(exc):
                raise
            raise StopInterrupted(batch_id) from None  # no chained traceback: see the class
        raise StopRequested(batch_id)


def _interrupted(exc: Py4JJavaError) -> bool:
    """Whether a JVM call failed because the query's thread was interrupted (the stop)."""
    text = str(exc)
    return any(
        f"java.{name}" in text
        for name in (
            "lang.InterruptedException",
            "io.InterruptedIOException",
            "nio.channels.ClosedByInterruptException",
        )
    )


class _StopInterruptFilter(logging.Filter):
    """py4j logs every exception a Python callback raises, with its traceback; a parked
    batch's `StopRequested` is the stop, not an error (Spark ends the query as stopped)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StopRequested)


def hide_stop_tracebacks() -> None:
    """Keep py4j's log of a parked batch's `StopRequested` out (once per process)."""
    callbacks = logging.getLogger("py4j.clientserver")
    if not any(isinstance(f, _StopInterruptFilter) for f in callbacks.filters):
        callbacks.addFilter(_StopInterruptFilter())


# Who reports a file sink's batch interrupted by the stop as an error, with its stack
# trace (the batch is repeated, and committed once, by the next run): the writer, and the
# scheduler and broadcasts of a batch being planned when the query stops.
_INTERRUPT_LOGGERS = (
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.scheduler.DAGScheduler",
    "org.apache.spark.broadcast.TorrentBroadcast",
    # the next batch's offset log being written when the stop came (its temporary file's
    # permissions set through a shell: "Interrupted while joining"); it is renamed into
    # place only once written, so the batch is logged whole or not at all
    "org.apache.hadoop.util.Shell",
    # real-time mode: the long-lived tasks of the Kafka sink, killed by the stop
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.util.Utils",
)


def wait_for_tasks(spark: Any, run_id: str, timeout: float) -> None:
    """Wait (at most `timeout`) for the jobs of a stopped query's run (its job group) to
    end, so that their killed tasks log while `quiet_interrupts` holds."""
    if is_connect(spark):
        return
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout

    def running() -> bool:
        infos = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(run_id)]
        return any(info is not None and info.status == "RUNNING" for info in infos)

    while running() and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the status tracker for the killed tasks' end


@contextmanager
def quiet_interrupts(spark: Any) -> Iterator[None]:
    """While stopping, an interrupted batch is expected: keep its stack traces out of the
    log. (A real failure still ends the job with exit 1 and is logged by Spark's
    MicroBatchExecution and by `StreamJob.run_until_signalled`.)"""
    if is_connect(spark):  # the server's log: not ours to set
        yield
        return
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    configurator = log4j.core.config.Configurator
    previous = {name: log4j.LogManager.getLogger(name).getLevel() for name in _INTERRUPT_LOGGERS}
    for name in _INTERRUPT_LOGGERS:
        configurator.setLevel(name, log4j.Level.OFF)
    try:
        yield
    finally:
        for name, level in previous.items():
            configurator.setLevel(name, level)
