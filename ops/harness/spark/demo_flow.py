"""The Spark demo (`make spark-demo`, `python -m ops.spark_demo`): Spark sender ->
router -> Spark receiver.

Starts a fresh topology (send units, receive units and a sweeper as processes), the
Spark receiver on every receive queue and the Spark sender on an input directory, drops
business records into that directory as files over time, waits until the receiver has
accounted for every message, stops everything cleanly, and then checks the receiver's
Parquet output (complete groups, ordinary records, duplicates, violations) against the
input files with `ops.harness.verdict.verify`, printing the same summary as the demo. The
interleavings on both sides are judged, as in the demo, by the capacity rule from what
the transfer topic and the receive queues hold (read to their end with read_committed
once the transaction timeout has passed), decoded from the payloads
(`ops.harness.spark.demo_records`). Its command line is `ops/spark_demo.py`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ops.harness.console import Console
from ops.harness.scenarios.demo_run import SUMMARY_WIDTH, DemoResult, summary_rows
from ops.harness.spark.demo_records import expected, read_output, spark_message
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.collect import read_sides
from ops.harness.verdict.sides import CapacitySpec, judge_sides
from ops.harness.verdict.verify import verify
from router.config import RouterSettings
from spark_jobs import domain, receiver, sender, workload
from spark_jobs.session import kafka_options


@dataclass(frozen=True)
class SparkDemoSpec:
    business: workload.BusinessWorkload
    files: int = 10
    file_interval_s: float = 1.0
    max_files_per_trigger: int | None = None
    segment_bytes: int = 4096
    group_timeout_s: float = 300.0
    trigger_seconds: float = 1.0
    timeout_s: float = 600.0


def run_spark_demo(
    spark: Any,
    base: RouterSettings,
    spec: SparkDemoSpec,
    pipeline_spec: PipelineSpec,
    run_dir: Path,
    *,
    keep: bool = False,
    out: TextIO | Console | None = None,
) -> DemoResult:
    """`out`: a Console, or where to write (default: stdout); rich on a terminal, plain
    text else."""
    console = out if isinstance(out, Console) else Console(out)
    say = console.say

    biz = spec.business
    input_dir, output_dir = run_dir / "input", run_dir / "output"
    pipeline = Pipeline(base, pipeline_spec, run_dir, name=biz.run_id, keep=keep)
    t = pipeline.settings.topology
    kafka = kafka_options(pipeline.settings.kafka)
    say(
        f"spark demo: topology {t.name!r}: Spark sender -> {len(t.send_queues)} send "
        f"queues x {t.send_queue_partitions} partitions -> {t.receive_units} receive-side "
        f"units -> {len(t.receive_queues)} receive queues -> Spark receiver"
    )
    say(f"   Spark {spark.version}, master {spark.sparkContext.master}; run directory {run_dir}")
    jobs: list[Any] = []
    try:
        say(
            f"[1/5] creating topics, starting {pipeline_spec.send_units} send units, "
            f"{pipeline_spec.receive_units} receive units and {pipeline_spec.sweepers} sweeper"
        )
        pipeline.start()
        say("[2/5] starting the Spark receiver (all receive queues) and the Spark sender")
        recv = receiver.start(
            spark,
            receiver.ReceiverConfig(
                tuple(t.receive_queues),
                kafka,
                str(run_dir / "checkpoints" / "receiver"),
                str(output_dir),
                group_timeout_ms=int(spec.group_timeout_s * 1000),
                trigger_seconds=spec.trigger_seconds,
            ),
            name=f"{biz.run_id}-receiver",
        )
        jobs.append(recv)
        input_dir.mkdir(parents=True, exist_ok=True)
        send = sender.start(
            spark,
            sender.read_files(spark, str(input_dir), spec.max_files_per_trigger),
            sender.SenderConfig(
                tuple(t.send_queues),
                kafka,
                str(run_dir / "checkpoints" / "sender"),
                str(run_dir / "rejects"),
                segment_bytes=spec.segment_bytes,
                max_guarantee_id_bytes=pipeline.settings.routing.max_guarantee_id_bytes,
                trigger_seconds=spec.trigger_seconds,
            ),
            name=f"{biz.run_id}-sender",
        )
        jobs.append(send)

        started = time.monotonic()
        while not all(j.query.lastProgress for j in jobs):
            failed = [j for j in jobs if not j.active]
            if failed:
                raise RuntimeError(f"{failed[0].name} stopped: {failed[0].failure()}")
            if time.monotonic() - started > 180:
                raise TimeoutError("the Spark jobs did not finish their first micro-batch in 180 s")
            time.sleep(0.2)  # polling the queries' progress
        say(f"   both jobs ran their first micro-batch ({time.monotonic() - started:.1f} s)")

        items = workload.records(biz)
        wanted = sum(len(domain.expected_messages(r, spec.segment_bytes)) for r in items)
        say(
            f"[3/5] dropping {len(items)} business records ({biz.orders} purchase orders, "
            f"{biz.documents} documents, {biz.updates} stock updates = {wanted} messages) "
            f"into {input_dir} as {spec.files} files"
        )
        t0 = time.monotonic()
        next_drop = t0
        chunks = workload.split(items, spec.files)
        with console.progress("accounted for by the receiver", wanted) as bar:
            while True:
                now = time.monotonic()
                if chunks and now >= next_drop:
                    workload.drop(
                        input_dir, f"records-{spec.files - len(chunks):04d}.json", chunks.pop(0)
                    )
                    next_drop += spec.file_interval_s
                failed = [j for j in jobs if not j.active]
                if failed:
                    raise RuntimeError(f"{failed[0].name} stopped: {failed[0].failure()}")
                bar.update(
                    recv.metric("messages"),
                    f"files {spec.files - len(chunks):>3}/{spec.files}   sent "
                    f"{send.metric('messages'):>6}/{wanted}",
                )
                # A row the receiver's watermark dropped is counted, not written: it is
                # lost to the checks, and fails the run below. An ordinary record's copy
                # is counted too (the record itself is in the output once).
                if not chunks and recv.accounted >= wanted:
                    break
                if now - t0 > spec.timeout_s:
                    say(f"   timed out after {spec.timeout_s:.0f} s")
                    break
                time.sleep(0.1)  # pacing the file drops and polling the jobs' counters
        seconds = time.monotonic() - t0
        say(
            f"[4/5] stopping the Spark jobs, then the units (SIGTERM); "
            f"{recv.metric('messages')} messages accounted for in {seconds:.1f} s"
        )
        for job in (send, recv):
            job.stop()
        failures = [f"{j.name}: {j.failure()}" for j in jobs if j.failure()]
        exit_codes = pipeline.stop()
        assert pipeline.stopped_at is not None

        say(
            f"[5/5] verifying the receiver's Parquet output ({output_dir}) against the input, "
            "and both sides' interleavings from what the destinations hold"
        )
        got = read_output(spark, output_dir)
        sent = expected(input_dir, spec.segment_bytes)
        report = verify(sent, got.seen)
        fwd, recv_read = read_sides(pipeline.settings, pipeline.stopped_at, decode=spark_message)
        report.send, report.receive = judge_sides(
            recv_read.records,
            fwd.records,
            CapacitySpec(fwd.destinations, recv_read.destinations),
        )
        shared = pipeline.shared()
        metrics = pipeline.unit_metrics()
        rtpm = {
            role: m.get("redis_round_trips", 0) / max(m.get("messages_in", 0), 1)
            for role, m in metrics.items()
            if role.endswith("-unit")
        }
        sender_failures = (
            [f"{send.metric('rejected')} input records rejected"] if send.metric("rejected") else []
        )
        if recv.dropped_by_watermark:
            sender_failures.append(
                f"{recv.dropped_by_watermark} messages older than the receiver's watermark dropped"
            )
        result = DemoResult(
            report,
            seconds,
            shared,
            rtpm,
            got.latencies_ms,
            exit_codes,
            sender_failures + failures,
            got.undecodable + fwd.undecodable + recv_read.undecodable,
            senders="the Spark sender",
        )
        say(
            f"   receiver output: {got.rows.get('groups', 0)} complete groups, "
            f"{got.rows.get('records', 0)} ordinary records, {got.rows['duplicates']} "
            f"duplicates (and {recv.duplicates_dropped} copies of ordinary records counted), "
            f"{got.rows['violations']} violations"
        )
        if got.rows["violations"]:
            result.extra_violations.append(
                f"receiver violations: {got.rows['violations']} (e.g. {'; '.join(got.reasons)})"
            )
        console.summary(summary_rows(result), SUMMARY_WIDTH)
        return result
    finally:
        for job in jobs:
            if job.active:
                job.stop()
        pipeline.stop()
        if not keep:
            pipeline.cleanup()
