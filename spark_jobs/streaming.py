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
file system the query's own process can read), and the sink writes nothing once its run's
marker exists. `stop()` waits until the batch being written has finished and is committed,
and then stops the query (unless that batch outlasts `stop`'s timeout, 120 s by default:
then it stops inside it, with a warning, and the batch is repeated after a restart). A
batch that starts after the marker is parked, not failed: in a classic session the sink
waits in an interruptible JVM call on the query's own thread until `stop()` interrupts
it, which Spark takes for the stop it is (SPARK-39218: no error, no stack trace, the
query ends without an exception); the batch's offsets are logged, its commit is not, so
the next run repeats it whole with the same input. Under Spark Connect the sink runs in
the server's Python worker, which has no JVM of ours to wait in: it refuses the batch by
raising `StopRequested` (the server logs it; `StreamJob.failure()` does not count it).
Nothing of this lives in a driver-side Python object the sink needs, so it works the same
when the `foreachBatch` function runs in a Spark Connect server's Python worker. A job
killed with SIGKILL, or a driver that dies, can still stop inside a batch: see README
("Spark jobs").

A requested stop ends with one INFO line naming the batches this run finished and the
one it left for the restart, if any; batches slower than the trigger interval are
counted (`Progress`) and summarised in one line at the stop instead of Spark's warning
per batch (`session.build_session` raises `ProcessingTimeExecutor` to ERROR).
"""

from __future__ import annotations

import logging
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException

from spark_jobs import checkpoints
from spark_jobs.progress import Progress, listen, unlisten
from spark_jobs.session import is_connect

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


def _hide_stop_tracebacks() -> None:
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


def _wait_for_tasks(spark: Any, run_id: str, timeout: float) -> None:
    """Wait (at most `timeout`) for the jobs of a stopped query's run (its job group) to
    end, so that their killed tasks log while `_quiet_interrupts` holds."""
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
def _quiet_interrupts(spark: Any) -> Iterator[None]:
    """While stopping, an interrupted batch is expected: keep its stack traces out of the
    log. (A real failure still ends the job with exit 1 and is logged by Spark's
    MicroBatchExecution and by `run_until_signalled`.)"""
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


@dataclass(frozen=True)
class FileSink:
    """Spark's file sink: `path` (any Hadoop path), its format and partition columns."""

    path: str
    format: str = "parquet"
    partition_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class KafkaSink:
    """Spark's Kafka sink (`options`: `kafka.`-prefixed client properties; the rows name
    their `topic`), run in real-time mode (`trigger(realTime=...)`): long-lived tasks
    write each record as it comes, and the query checkpoints every trigger interval
    (`spark_jobs.realtime`)."""

    options: tuple[tuple[str, str], ...]


class StreamJob:
    """A streaming query into `write` (a foreachBatch function), a `FileSink`, or a
    `KafkaSink` in real-time mode."""

    def __init__(
        self,
        spark: Any,
        name: str,
        df: Any,
        write: Writer | FileSink | KafkaSink,
        checkpoint: str,
        trigger_seconds: float,
    ) -> None:
        self.spark = spark
        self.name = name
        self.checkpoint = checkpoint.rstrip("/")
        self.writer = write
        self.file_sink = write if isinstance(write, FileSink) else None
        self.kafka_sink = write if isinstance(write, KafkaSink) else None
        # Each run its own stop marker: one left by an earlier run never stops this one.
        self.stop_marker = f"{self.checkpoint}/stop/{secrets.token_hex(8)}"
        self.sink = (
            BatchSink(write, self.stop_marker)
            if not isinstance(write, (FileSink, KafkaSink))
            else None
        )
        self._df = df
        self._trigger = f"{trigger_seconds} seconds"
        self._trigger_s = trigger_seconds
        self.query: Any = None
        self._listening: Any = None  # progress.listen's handle while the query runs
        # A real-time batch lasts its whole trigger interval by design: none is "behind".
        self.progress = Progress(name, 0 if self.kafka_sink else trigger_seconds * 1000)

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
        _hide_stop_tracebacks()
        self._listening = listen(self.spark, self.progress.report, self.progress.ended)
        writer = self._df.writeStream.queryName(self.name)
        if self.file_sink is not None:
            writer = (
                writer.format(self.file_sink.format)
                .outputMode("append")
                .option("path", self.file_sink.path)
                .partitionBy(*self.file_sink.partition_by)
            )
        elif self.kafka_sink is not None:
            writer = (
                writer.format("kafka").outputMode("update").options(**dict(self.kafka_sink.options))
            )
        else:
            writer = writer.foreachBatch(self.sink)
        writer = writer.option("checkpointLocation", self.checkpoint)
        if self.kafka_sink is not None:
            writer = writer.trigger(realTime=self._trigger)
        else:
            writer = writer.trigger(processingTime=self._trigger)
        written = (self.file_sink.path,) if self.file_sink is not None else ()
        with checkpoints.manager_for(self.spark, self.checkpoint, *written):
            self.query = writer.start()
        self.progress.follow(str(self.query.id))
        log.info("%s started (checkpoint %s)", self.name, self.checkpoint)
        return self

    @property
    def active(self) -> bool:
        return bool(self.query is not None and self.query.isActive)

    def failure(self) -> str | None:
        """Why the query ended, if it failed (a batch refused or parked during the stop is
        no failure)."""
        if self.query is None:
            return None
        exc = self.query.exception()
        if exc is None or StopRequested.MARKER in str(exc):
            return None
        return str(exc)

    def stop(self, timeout: float = 120.0) -> None:
        """Stop between micro-batches (foreachBatch: see the module's docstring), or at
        once (a file sink: a batch it interrupts is repeated by the next run and committed
        once; a Kafka sink in real-time mode: what it wrote since its last checkpoint is
        written again by the next run). A foreachBatch batch still running after `timeout`
        is stopped inside, with a warning: Spark's stop interrupts it (and may itself wait
        for its tasks)."""
        if self.query is None:
            return
        with _quiet_interrupts(self.spark):
            if self.kafka_sink is not None and self.active:
                self._after_a_checkpoint(timeout)
            if self.sink is not None and self.active:
                self.spark.createDataFrame([(self.name,)], "stopping STRING").write.mode(
                    "overwrite"
                ).text(self.stop_marker)
                deadline = time.monotonic() + timeout
                while (
                    self.active
                    and self.sink.parked is None
                    and self.query.status["isTriggerActive"]
                ):
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
            run_id = str(self.query.runId)
            self.query.stop()
            if self.kafka_sink is not None:  # its long-lived tasks end after the query
                _wait_for_tasks(self.spark, run_id, 10.0)
        # The listener bus delivers the last progress before the termination event.
        if not self.progress.terminated.wait(30):
            log.warning("%s: no termination event from Spark within 30 s", self.name)
        unlisten(self.spark, self._listening)
        if self.progress.dropped_by_watermark:
            log.warning(
                "%s: %d rows were older than the watermark and dropped",
                self.name,
                self.progress.dropped_by_watermark,
            )
        behind = self.progress.behind_summary()
        if behind:
            log.info("%s", behind)
        if self.failure():
            log.info("%s stopped after a failure: %s", self.name, self.progress.finished())
            return
        log.info("%s stopped on request: %s; %s", self.name, self.progress.finished(), self.left())

    @property
    def _where(self) -> str:
        if self.kafka_sink is not None:
            return "after the running real-time batch"
        return "between micro-batches"

    def _after_a_checkpoint(self, timeout: float) -> None:
        """Real-time mode: wait for the batch that is running to end (its progress
        reported: its offsets checkpointed), at most one trigger interval and `timeout`,
        so that what the next run writes again is what came in the moments since, not
        everything since the last checkpoint."""
        seen = self.progress.batches
        deadline = time.monotonic() + min(timeout, self._trigger_s + 5)
        while self.active and self.progress.batches == seen and time.monotonic() < deadline:
            time.sleep(0.02)  # polling the listener's count of finished batches

    def left(self) -> str:
        """What the stopped query left for the next run, in words: the batch whose offsets
        the checkpoint logged but whose commit it did not (repeated whole, with the same
        input), or nothing."""
        parked = self.sink.parked if self.sink is not None else None
        last = self.progress.last_batch
        batch = parked if parked is not None else (last + 1 if last is not None else None)
        if batch is not None and (
            exists(self.spark, f"{self.checkpoint}/offsets/{batch}")
            and not exists(self.spark, f"{self.checkpoint}/commits/{batch}")
        ):
            done = "was not started" if parked is not None else "was interrupted"
            return (
                f"batch {batch} {done} and runs again, with the same input, after a restart "
                f"from {self.checkpoint}"
            )
        return f"no batch left half-done: a restart from {self.checkpoint} reads new input"

    def run_until_signalled(self, stop_file: str | None = None) -> int:
        """Run until SIGTERM/SIGINT or until `stop_file` exists (then stop cleanly, exit 0),
        or until the query fails (exit 1)."""
        stop = threading.Event()

        def request(signum: int, _frame: Any) -> None:
            log.info("%s: %s, stopping %s", self.name, signal.Signals(signum).name, self._where)
            stop.set()

        signal.signal(signal.SIGTERM, request)
        signal.signal(signal.SIGINT, request)
        while self.active and not stop.wait(1.0):
            if stop_file and exists(self.spark, stop_file):
                log.info("%s: %s exists, stopping %s", self.name, stop_file, self._where)
                break
        self.stop()
        failure = self.failure()
        if failure:
            log.error("%s failed: %s", self.name, failure)
            return 1
        return 0
