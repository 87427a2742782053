"""The Spark benchmark (`make spark-bench`, `python -m ops.spark_bench`): Spark's rate
source -> Spark sender -> send units -> transfer topic -> receive units -> Spark receiver.

One local SparkSession runs both queries: the sender (`sender.read_rate` mapped by
`sender.rate_records` into purchase orders of 1..4 lines, the groups, and stock updates,
the ordinary records; written by `sender.SendBatch` through `api.to_router_rows` and
Spark's Kafka sink) and the receiver (`receiver.start`: the file sink, partitioned by
`output`). The units run as processes (`ops.harness.pipeline`). After `seconds` of load
the sender stops between micro-batches, the receiver drains, and the figures come from
what the receiver committed (`ops.harness.sparkbench_output`, `sparkbench_stats`):

* achieved: messages in the receiver's micro-batches committed in the steady window
  (after `warmup_s`, until the sender stopped) per second, against the offered load;
* group-completion latency: from a group's last member's `created_at` (the sender's
  micro-batch time) to the commit of the receiver's micro-batch that emitted it
  (progress timestamp + triggerExecution), for groups created in the steady window;
* completeness: the output against the messages recomputed from the rows generated.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import shutil
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from ops.harness import sparkbench_output, sparkbench_report
from ops.harness.console import Console
from ops.harness.pipeline import Pipeline, PipelineSpec
from ops.harness.spark_demo import ensure_stack
from router.config import RouterSettings, load_settings
from spark_jobs import receiver, sender
from spark_jobs.session import SparkOptions, build_session, kafka_options, key_values
from spark_jobs.streaming import StreamJob

# One micro-batch of the file sink per log file, so each batch's files are known (the
# default compacts every 10 batches; `sparkbench_stats.batch_of_files` copes either way).
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
        say("   reading the receiver's output back (through the file sink's log)")
        got = sparkbench_output.read(spark, run_dir / "output")
        generated = sparkbench_output.rate_rows(
            run_dir / "checkpoints" / "sender", spec.rows_per_second
        )
        complete = sparkbench_output.completeness(
            spark, run_dir / "output", run_id, generated, spec.max_lines
        )
        result = sparkbench_report.figures(
            listener.reports.get(f"{run_id}-receiver", []),
            listener.reports.get(f"{run_id}-sender", []),
            got,
            complete,
            (started_ms + spec.warmup_s * 1000, stopped_ms),
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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ops.spark_bench",
        description="Spark benchmark: rate source -> Spark sender -> router -> Spark "
        "receiver; sustained msg/s and group-completion latency (exit 1 if the output is "
        "incomplete; the goal is reported, met or not).",
    )
    p.add_argument(
        "--rates",
        default="5000,2500",
        help="Offered messages per second, one run each, side by side in one session "
        "(default: %(default)s: the goal's load, and half of it)",
    )
    p.add_argument("--rate", type=int, help="One run at this rate (instead of --rates)")
    p.add_argument("--seconds", type=float, help="Seconds of load per run (default 150)")
    p.add_argument("--warmup", type=float, help="Seconds left out of the figures (default 75)")
    p.add_argument(
        "--quick", action="store_true", help="A short check: one run, 500 msg/s, 25 s, 8 s warm-up"
    )
    p.add_argument("--max-lines", type=int, help="A purchase order's lines: 1..N (default 40)")
    p.add_argument("--max-offsets-per-trigger", type=int, help="Lever: bound receiver batches")
    p.add_argument("--fair", action="store_true", help="Lever: FAIR scheduler pools")
    p.add_argument("--linger-ms", type=int, help="Lever: sender producer linger.ms")
    p.add_argument("--compression", help="Lever: sender producer compression.type (lz4, ...)")
    p.add_argument("--trigger-seconds", type=float, default=1.0)
    p.add_argument("--send-units", type=int, default=2)
    p.add_argument("--receive-units", type=int, default=2)
    p.add_argument("--transfer-partitions", type=int, default=4)
    p.add_argument("--receive-queues", type=int, default=4)
    p.add_argument("--master", default="local[2]", help="(default: %(default)s)")
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--jars-dir", type=Path)
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE")
    p.add_argument("--results", type=Path, default=Path(".results/spark-bench"))
    p.add_argument("--keep", action="store_true", help="Keep the topics, output, checkpoints")
    p.add_argument("--config", type=Path, help="Router TOML configuration")
    return p


def specs_of(args: argparse.Namespace) -> list[BenchSpec]:
    """The runs asked for: one per rate of `--rates`, or one (`--rate`, `--quick`)."""
    base = (
        BenchSpec(rate=500, seconds=25, warmup_s=8, drain_timeout_s=45)
        if args.quick
        else (BenchSpec())
    )
    producer = {"kafka.linger.ms": args.linger_ms, "kafka.compression.type": args.compression}
    levers = {
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "max_lines": args.max_lines,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "trigger_seconds": args.trigger_seconds,
        "fair": args.fair or None,
        "producer": tuple((k, str(v)) for k, v in producer.items() if v is not None) or None,
    }
    spec = replace(base, **{k: v for k, v in levers.items() if v is not None})
    if args.rate is not None:
        return [replace(spec, rate=args.rate)]
    if args.quick:
        return [spec]
    rates = [int(r) for r in str(args.rates).split(",") if r.strip()]
    if not rates or min(rates) <= 0:
        raise SystemExit(f"--rates needs positive rates, not {args.rates!r}")
    return [replace(spec, rate=r) for r in rates]


def main(argv: list[str] | None = None, settings: RouterSettings | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)-7s %(name)s %(message)s"
    )
    specs = specs_of(args)
    base = settings or load_settings(args.config)
    console = Console()
    ensure_stack(base, console.say)
    conf = key_values(args.spark_conf, "--spark-conf")
    if any(spec.fair for spec in specs):
        conf["spark.scheduler.mode"] = "FAIR"
    spark = build_session(
        SparkOptions(
            master=args.master,
            app_name="router-spark-bench",
            driver_memory=args.driver_memory,
            jars_dir=args.jars_dir,
            conf=conf,
        )
    )
    pipeline_spec = PipelineSpec(
        send_units=args.send_units,
        receive_units=args.receive_units,
        transfer_partitions=args.transfer_partitions,
        receive_queues=args.receive_queues,
    )
    out_dir = args.results / f"spark-bench-{secrets.token_hex(3)}"
    results = []
    try:
        for i, spec in enumerate(specs):
            run_dir = out_dir / f"run-{i + 1}-{spec.rate}"
            results.append(
                run_bench(spark, base, spec, pipeline_spec, run_dir, keep=args.keep, out=console)
            )
            console.table(["figure", "value", "note"], sparkbench_report.table_rows(results[-1]))
    finally:
        spark.stop()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "results.md").write_text(sparkbench_report.markdown(results))
    console.say(f"results: {out_dir / 'results.md'}, {out_dir / 'results.json'}")
    failures = [f for r in results for f in r["failures"]]
    for failure in failures:
        console.say(f"   {failure}")
    for r in results:
        console.say(sparkbench_report.verdict(r))
    return 0 if all(r["complete"] for r in results) and not failures else 1
