"""The Spark benchmark (`make spark-bench`, `python -m ops.spark_bench`): Spark's rate
source -> Spark sender -> send units -> transfer topic -> receive units -> Spark receiver.

One local SparkSession runs the queries: the sender and the receiver (`receiver.start`:
the file sink, partitioned by `output`). The sender (`BenchSpec.sender`) is the
micro-batch one (`sender.read_rate` mapped by `sender.rate_records` into purchase orders
of 1..`max_lines` lines, the groups, and stock updates, the ordinary records; written by
`sender.SendBatch` through `api.to_router_rows` and Spark's Kafka sink) or the real-time
one (`sender.start_realtime`) on an upstream topic that a micro-batch writer fills with the
same records (`bench_upstream`). The units run as processes
(`ops.harness.stack.pipeline`). After `seconds` of load the query reading the rate source
stops between micro-batches, the receiver drains, and the figures come from what the
receiver committed (`ops.harness.spark.bench_output`, `bench_stats`):

* achieved: messages in the receiver's micro-batches committed in the steady window
  (after `warmup_s`, until the sender stopped) per second, against the offered load;
* group-completion latency: from a group's last member's `created_at` (the sender's
  micro-batch time; for the real-time sender, its upstream record's Kafka timestamp) to
  the commit of the receiver's micro-batch that emitted it
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
from functools import partial
from pathlib import Path
from typing import Any

from ops.harness.console import Console
from ops.harness.spark import bench_hops, bench_output, bench_report, bench_upstream
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from router.config import RouterSettings
from spark_jobs import realtime, receiver, sender
from spark_jobs.progress import listen, unlisten
from spark_jobs.session import kafka_options
from spark_jobs.streaming import StreamJob

# One micro-batch of the file sink per log file, so each batch's files are known (the
# default compacts every 10 batches; `bench_stats.batch_of_files` copes either way).
SINK_LOG_COMPACT = "spark.sql.streaming.fileSink.log.compactInterval"
MICRO_BATCH, REAL_TIME = "micro-batch", "real-time"
SENDERS = (MICRO_BATCH, REAL_TIME)


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
    # MICRO_BATCH: `sender.start` on the rate source; REAL_TIME: `sender.start_realtime` on
    # an upstream topic the rate source fills (`bench_upstream`), checkpointing every
    # `checkpoint_seconds`
    sender: str = "micro-batch"
    checkpoint_seconds: float = 5.0

    @property
    def messages_per_row(self) -> float:
        """Half the rows a stock update (1 message), half a purchase order (1..max_lines)."""
        return 0.5 + 0.5 * (self.max_lines + 1) / 2

    @property
    def rows_per_second(self) -> int:
        return max(1, round(self.rate / self.messages_per_row))


class ProgressLog:
    """Every progress report of the named queries, as JSON dicts (`progress.listen`)."""

    def __init__(self) -> None:
        self.reports: dict[str, list[dict[str, Any]]] = {}

    def report(self, report: dict[str, Any]) -> None:
        self.reports.setdefault(str(report.get("name")), []).append(report)


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


def source_dir(spec: BenchSpec) -> str:
    """The checkpoint (under `checkpoints/`) of the query that reads the rate source."""
    return "upstream" if spec.sender == REAL_TIME else "sender"


def _start_sender(
    spark: Any, pipeline: Pipeline, spec: BenchSpec, kafka: dict[str, str], run_dir: Path
) -> tuple[StreamJob, StreamJob | None]:
    """The sender, and for the real-time one the upstream writer that feeds it."""
    run_id = run_dir.name
    t = pipeline.settings.topology
    checkpoints = run_dir / "checkpoints"
    max_id = pipeline.settings.routing.max_guarantee_id_bytes
    pool = "sender" if spec.fair else None
    if spec.sender == MICRO_BATCH:
        send_config = sender.SenderConfig(
            tuple(t.send_queues),
            {**kafka, **dict(spec.producer)},
            str(checkpoints / "sender"),
            str(run_dir / "rejects"),
            max_guarantee_id_bytes=max_id,
            trigger_seconds=spec.trigger_seconds,
        )
        rate = sender.read_rate(spark, spec.rows_per_second, run_id, spec.max_lines, False)
        start = partial(sender.start, spark, rate, send_config, name=f"{run_id}-sender")
        return _in_pool(spark, pool, start), None
    if spec.sender != REAL_TIME:
        raise ValueError(f"unknown sender {spec.sender!r}: one of {SENDERS}")
    upstream, rejects = bench_upstream.topics(run_id)
    bench_upstream.create(pipeline.settings, (upstream, rejects))
    rt_config = realtime.RealTimeConfig(
        tuple(t.send_queues),
        rejects,
        {**kafka, **dict(spec.producer)},
        str(checkpoints / "sender"),
        spec.checkpoint_seconds,
        max_guarantee_id_bytes=max_id,
    )
    records = realtime.read_upstream(spark, upstream, kafka)
    send = sender.start_realtime(spark, records, rt_config, name=f"{run_id}-sender")
    writer = bench_upstream.start_writer(
        spark,
        kafka,
        upstream,
        spec.rows_per_second,
        run_id,
        spec.max_lines,
        str(checkpoints / "upstream"),
        spec.trigger_seconds,
        f"{run_id}-upstream",
    )
    return send, writer


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
    listening = None
    try:
        pipeline.start()
        spark.conf.set(SINK_LOG_COMPACT, "1000000")
        listening = listen(spark, listener.report)
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
        send, upstream = _start_sender(spark, pipeline, spec, kafka, run_dir)
        jobs += [send] + ([upstream] if upstream is not None else [])
        source = upstream or send  # the query that reads the rate source
        started_ms = time.time() * 1000
        t0 = time.monotonic()
        with console.progress("committed by the receiver", None) as bar:
            while time.monotonic() - t0 < spec.seconds:
                _check(jobs)
                bar.update(recv.metric("messages"), f"generated {source.progress.input_rows} rows")
                time.sleep(0.5)  # pacing the progress line; the load runs in Spark
        source.stop()
        stopped_ms = time.time() * 1000
        generated = bench_output.rate_rows(
            run_dir / "checkpoints" / source_dir(spec), spec.rows_per_second
        )
        if upstream is None:
            sent = send.metric("messages")
            say(f"   sender stopped: {sent} messages sent; draining the receiver")
        else:  # the real-time sender goes on until the receiver has it all
            sent = bench_output.expected_count(spark, run_id, generated, spec.max_lines)
            say(f"   upstream writer stopped: {generated} records, {sent} messages; draining")
        with console.progress("committed by the receiver", sent) as bar:
            while recv.accounted < sent:
                _check([recv] + [send] * (upstream is not None))
                if time.monotonic() - t0 > spec.seconds + spec.drain_timeout_s:
                    say(f"   drain timed out after {spec.drain_timeout_s:.0f} s")
                    break
                bar.update(recv.metric("messages"))
                time.sleep(0.5)  # polling the receiver's observed count
        recv.stop()
        send.stop()
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
        complete = bench_output.completeness(
            spark, run_dir / "output", run_id, generated, spec.max_lines
        )
        result = bench_report.figures(
            listener.reports.get(f"{run_id}-receiver", []),
            listener.reports.get(source.name, []),
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
        if listening is not None:
            unlisten(spark, listening)
        if previous_compact is None:
            spark.conf.unset(SINK_LOG_COMPACT)
        else:
            spark.conf.set(SINK_LOG_COMPACT, previous_compact)
        pipeline.stop()
        if not keep:
            if spec.sender == REAL_TIME:
                bench_upstream.delete(pipeline.settings, bench_upstream.topics(run_id))
            pipeline.cleanup()
            for name in ("output", "checkpoints"):
                shutil.rmtree(run_dir / name, ignore_errors=True)
