"""The Spark benchmark (`make spark-bench`, `python -m ops.spark_bench`): Spark's rate
source -> Spark sender -> send units -> transfer topic -> receive units -> Spark receiver.

One local SparkSession runs both queries: the sender (`sender.read_rate` mapped by
`sender.rate_records` into purchase orders of 1..4 lines, the groups, and stock updates,
the ordinary records; written by `sender.SendBatch` through `api.to_router_rows` and
Spark's Kafka sink) and the receiver (`receiver.start`: the file sink, partitioned by
`output`). The units run as processes (`ops.harness.stack.pipeline`). After `seconds` of load
the sender stops between micro-batches, the receiver drains, and the figures come from
what the receiver committed (`ops.harness.spark.bench_output`, `bench_stats`):

* achieved: messages in the receiver's micro-batches committed in the steady window
  (after `warmup_s`, until the sender stopped) per second, against the offered load;
* group-completion latency: from a group's last member's `created_at` (the sender's
  micro-batch time) to the commit of the receiver's micro-batch that emitted it
  (progress timestamp + triggerExecution), for groups created in the steady window;
* completeness: the output against the messages recomputed from the rows generated.

Its command line is `ops/spark_bench.py`.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from ops.harness.console import Console
from ops.harness.spark import bench_hops, bench_output, bench_report
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from router.config import RouterSettings
from spark_jobs import receiver, sender
from spark_jobs.session import kafka_options
from spark_jobs.streaming import StreamJob

# One micro-batch of the file sink per log file, so each batch's files are known (the
# default compacts every 10 batches; `bench_stats.batch_of_files` copes either way).
SINK_LOG_COMPACT = "spark.sql.streaming.fileSink.log.compactInterval"


@dataclass(frozen=True)
class BenchSpec:
    rate: int = 5_000  # offered messages per second
    seconds: float = 150.0  # of load
    # Left out of the figures: the JVM's JIT takes about a minute to settle (a receiver's
    # micro-batch of 10,000 messages took 4.6 s at first, 2.8 s after 60 s).
    warmup_s: float = 75.0
    drain_timeout_s: float = 120.0
    trigger_seconds: float = 1.0
    max_lines: int = 40  # a group has 1..max_lines members (the demo domain's orders)
    max_offsets_per_trigger: int | None = None  # receiver
    fair: bool = False  # each query in a FAIR scheduler pool of its own
    producer: tuple[tuple[str, str], ...] = ()  # kafka.* options of the sender's sink

    @property
    def messages_per_row(self) -> float:
        """Half the rows a stock update (1 message), half a purchase order (1..max_lines)."""
        return 0.5 + 0.5 * (self.max_lines + 1) / 2

    @property
    def rows_per_second(self) -> int:
        return max(1, round(self.rate / self.messages_per_row))


class ProgressLog(StreamingQueryListener):  # type: ignore[misc]
    """Every progress report of the named queries, as JSON dicts."""

    def __init__(self) -> None:
        self.reports: dict[str, list[dict[str, Any]]] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        report = json.loads(event.progress.json)
        self.reports.setdefault(str(report.get("name")), []).append(report)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def _in_pool(spark: Any, pool: str | None, start: Any) -> StreamJob:
    """Start a query with `spark.scheduler.pool` set (its thread inherits the property)."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    try:
        job: StreamJob = start()
        return job
    finally:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)


def _check(jobs: list[StreamJob]) -> None:
    for job in jobs:
        if not job.active:
            raise RuntimeError(f"{job.name} stopped: {job.failure()}")


def run_bench(
    spark: Any,
    base: RouterSettings,
    spec: BenchSpec,
    pipeline_spec: PipelineSpec,
    run_dir: Path,
    *,
    keep: bool = False,
    out: Console | None = None,
) -> dict[str, Any]:
    """Run one benchmark; returns its results (also written to `run_dir/result.json`)."""
    console = out or Console()
    say = console.say
    run_id = run_dir.name
    pipeline = Pipeline(base, pipeline_spec, run_dir, name=run_id, keep=keep)
    t = pipeline.settings.topology
    kafka = kafka_options(pipeline.settings.kafka)
    listener = ProgressLog()
    jobs: list[StreamJob] = []
    previous_compact = spark.conf.get(SINK_LOG_COMPACT, None)
    say(
        f"spark bench {run_id}: rate {spec.rate} msg/s offered ({spec.rows_per_second} "
        f"rows/s), {spec.seconds:.0f} s of load ({spec.warmup_s:.0f} s warm-up), Spark "
        f"{spark.version} {spark.sparkContext.master}; {pipeline_spec.send_units} send units, "
        f"{pipeline_spec.receive_units} receive units, {len(t.receive_queues)} receive queues"
    )
    try:
        pipeline.start()
        spark.conf.set(SINK_LOG_COMPACT, "1000000")
        spark.streams.addListener(listener)
        recv_config = receiver.ReceiverConfig(
            tuple(t.receive_queues),
            kafka,
            str(run_dir / "checkpoints" / "receiver"),
            str(run_dir / "output"),
            trigger_seconds=spec.trigger_seconds,
            max_offsets_per_trigger=spec.max_offsets_per_trigger,
        )
        recv = _in_pool(
            spark,
            "receiver" if spec.fair else None,
            lambda: receiver.start(spark, recv_config, name=f"{run_id}-receiver"),
        )
        jobs.append(recv)
        send_config = sender.SenderConfig(
            tuple(t.send_queues),
            {**kafka, **dict(spec.producer)},
            str(run_dir / "checkpoints" / "sender"),
            str(run_dir / "rejects"),
            max_guarantee_id_bytes=pipeline.settings.routing.max_guarantee_id_bytes,
            trigger_seconds=spec.trigger_seconds,
        )
        rate = sender.read_rate(spark, spec.rows_per_second, run_id, spec.max_lines, False)
        send = _in_pool(
            spark,
            "sender" if spec.fair else None,
            lambda: sender.start(spark, rate, send_config, name=f"{run_id}-sender"),
        )
        jobs.append(send)
        started_ms = time.time() * 1000
        t0 = time.monotonic()
        with console.progress("committed by the receiver", None) as bar:
            while time.monotonic() - t0 < spec.seconds:
                _check(jobs)
                bar.update(recv.metric("messages"), f"sent {send.metric('messages')}")
                time.sleep(0.5)  # pacing the progress line; the load runs in Spark
        send.stop()
        stopped_ms = time.time() * 1000
        sent = send.metric("messages")
        say(f"   sender stopped: {sent} messages sent; draining the receiver")
        with console.progress("committed by the receiver", sent) as bar:
            while recv.accounted < sent:
                _check([recv])
                if time.monotonic() - t0 > spec.seconds + spec.drain_timeout_s:
                    say(f"   drain timed out after {spec.drain_timeout_s:.0f} s")
                    break
                bar.update(recv.metric("messages"))
                time.sleep(0.5)  # polling the receiver's observed count
        recv.stop()
        failures = [f"{j.name}: {j.failure()}" for j in jobs if j.failure()]
        pipeline.stop()
        say("   reading each group's final back from the topics it crossed (its hops)")
        finals = {
            side: bench_hops.final_times(spark, topics, kafka)
            for side, topics in (
                ("send", tuple(t.send_queues)),
                ("transfer", (t.transfer_topic,)),
                ("receive", tuple(t.receive_queues)),
            )
        }
        say("   reading the receiver's output back (through the file sink's log)")
        got = bench_output.read(spark, run_dir / "output")
        generated = bench_output.rate_rows(run_dir / "checkpoints" / "sender", spec.rows_per_second)
        complete = bench_output.completeness(
            spark, run_dir / "output", run_id, generated, spec.max_lines
        )
        result = bench_report.figures(
            listener.reports.get(f"{run_id}-receiver", []),
            listener.reports.get(f"{run_id}-sender", []),
            got,
            complete,
            (started_ms + spec.warmup_s * 1000, stopped_ms),
            finals,
            spec.rate,
        )
        result.update(
            run_id=run_id,
            date=datetime.now(UTC).isoformat(timespec="seconds"),
            spec=asdict(spec),
            pipeline=asdict(pipeline_spec),
            sent_messages=sent,
            dropped_by_watermark=recv.dropped_by_watermark,
            failures=failures
            + [f"unit exit codes: {pipeline.exit_codes}"] * any(pipeline.exit_codes.values()),
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        return result
    finally:
        for job in jobs:
            if job.active:
                job.stop()
        spark.streams.removeListener(listener)
        if previous_compact is None:
            spark.conf.unset(SINK_LOG_COMPACT)
        else:
            spark.conf.set(SINK_LOG_COMPACT, previous_compact)
        pipeline.stop()
        if not keep:
            pipeline.cleanup()
            for name in ("output", "checkpoints"):
                shutil.rmtree(run_dir / name, ignore_errors=True)
