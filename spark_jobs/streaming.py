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
stop marker under the checkpoint, and the sink writes nothing once its run's marker
exists. `stop()` waits until the batch being written has finished and is committed,
and then stops the query (unless that batch outlasts `stop`'s timeout, 120 s by default:
then it stops inside it, with a warning, and the batch is repeated after a restart). A
batch that starts after the marker is parked until the stop, or refused under Spark
Connect: see `stopping`, where the sink, the stop's exceptions and the quieting of the
expected interruptions live (re-exported here). A job killed with SIGKILL, or a driver
that dies, can still stop inside a batch: see README ("Spark jobs").

A requested stop ends with one INFO line naming the batches this run finished and the
one it left for the restart, if any; batches slower than the trigger interval are
counted (`Progress`) and summarised in one line at the stop instead of Spark's warning
per batch (`session.build_session` raises `ProcessingTimeExecutor` to ERROR).
"""

from __future__ import annotations

import logging
import secrets
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from spark_jobs import checkpoints
from spark_jobs.progress import Progress, listen, unlisten
from spark_jobs.stopping import (
    BatchSink,
    StopInterrupted,
    StopRequested,
    Writer,
    exists,
    hide_stop_tracebacks,
    quiet_interrupts,
    wait_for_tasks,
)

__all__ = [
    "BatchSink",
    "FileSink",
    "KafkaSink",
    "StopInterrupted",
    "StopRequested",
    "StreamJob",
    "Writer",
    "exists",
]

log = logging.getLogger("spark_jobs.streaming")


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
        hide_stop_tracebacks()
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
        with quiet_interrupts(self.spark):
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
                wait_for_tasks(self.spark, run_id, 10.0)
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
