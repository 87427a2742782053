"""The Spark demo (`make spark-demo`, `python -m ops.spark_demo`): Spark sender ->
router -> Spark receiver.

Starts a fresh topology (send units, receive units and a sweeper as processes), the
Spark receiver on every receive queue and the Spark sender on an input directory, drops
business records into that directory as files over time, waits until the receiver has
accounted for every message, stops everything cleanly, and then checks the receiver's
Parquet output (complete groups, ordinary records, duplicates, violations) against the
input files with `ops.harness.verify`, printing the same summary as the demo. The
interleavings on both sides are judged, as in the demo, by the capacity rule from what
the transfer topic and the receive queues hold (read to their end with read_committed
once the transaction timeout has passed), decoded from the payloads.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import Message
from confluent_kafka.admin import AdminClient
from pyspark.sql import functions as F

from ops.harness.collect import read_sides
from ops.harness.console import Console
from ops.harness.demo import SUMMARY_WIDTH, DemoResult, summary_rows
from ops.harness.pipeline import Pipeline, PipelineSpec
from ops.harness.verify import CapacitySpec, Seen, Sent, judge_sides, verify
from router import contract
from router.backends.kafka import clients
from router.backends.redis.client import redis_client
from router.config import RouterSettings, RoutingSettings, load_settings
from router.contract import schemas, segments
from spark_jobs import domain, outputs, receiver, sender, workload
from spark_jobs.session import (
    SparkOptions,
    build_session,
    kafka_options,
    key_values,
    launched_by_spark_submit,
)

ROOT = Path(__file__).resolve().parents[2]  # the repository
STACK_SCRIPT = ROOT / "ops" / "stack.sh"


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


@dataclass
class ReceiverOutput:
    seen: list[Seen] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    undecodable: int = 0
    reasons: list[str] = field(default_factory=list)


def read_output(spark: Any, output: Path) -> ReceiverOutput:
    """Every message the receiver accounted for, as `Seen` records, from its Parquet
    output (read through the file sink's log: committed micro-batches only)."""
    out = ReceiverOutput()
    if not (output / "_spark_metadata").is_dir():
        out.rows = dict.fromkeys(outputs.OUTPUTS, 0)
        return out
    df = outputs.read(spark, str(output)).persist()
    out.rows = {name: 0 for name in outputs.OUTPUTS}
    out.rows.update(
        {r.output: r.n for r in df.groupBy("output").agg(F.count("*").alias("n")).collect()}
    )
    latency = F.unix_millis("received_at") - F.unix_millis("m.created_at")
    members = df.where(F.col("members").isNotNull()).select(
        "output",
        "queue",
        "guarantee_id",
        "messages",
        "received_at",
        "reason",
        F.explode("members").alias("m"),
    )
    for r in members.select("*", "m.*", latency.alias("latency")).collect():
        final = r.seq == r.messages - 1
        out.seen.append(Seen(r.queue, r.offset, r.record_id, r.guarantee_id, r.seq, final))
        if r.output == "groups":
            out.latencies_ms.append(float(r.latency))
        else:
            out.reasons.append(f"{r.guarantee_id}: {r.reason}")
    single = df.where(F.col("members").isNull()).select(
        "output",
        "queue",
        "offset",
        "record_id",
        "guarantee_id",
        "seq",
        "final",
        "reason",
        (F.unix_millis("received_at") - F.unix_millis("created_at")).alias("latency"),
    )
    for r in single.collect():
        record_id = r.record_id or f"unreadable:{r.queue}@{r.offset}"
        seq = r.seq if r.guarantee_id is not None and r.seq is not None else 0
        out.seen.append(Seen(r.queue, r.offset, record_id, r.guarantee_id, seq, bool(r.final)))
        if r.output == "records":
            out.latencies_ms.append(float(r.latency))
        elif r.output == "violations":
            out.undecodable += (r.reason or "").startswith("undecodable")
            if len(out.reasons) < 5:
                out.reasons.append(f"{r.guarantee_id or r.record_id}: {r.reason}")
    df.unpersist()
    return out


def spark_message(dest: str, m: Message) -> Seen | None:
    """A message of the Spark sender, identified by its payload (its schema named by the
    sender's schema header), with its append time on `dest`. A segment of a large
    document (a piece of its payload) is identified by its segment headers instead
    (`<segment-id>#<index>`, in the group of its own that carries it) and dated by the
    sender's `created-ms` header."""
    headers = dict(m.headers() or [])
    try:
        seg = segments.read(list(headers.items()))
        routing = contract.parse(list(headers.items()), RoutingSettings()) if seg else None
    except (segments.BadSegment, contract.BadInput):
        return None
    if seg is not None and routing is not None:
        created = headers.get(domain.CREATED_HEADER) or b""
        return Seen(
            dest,
            m.offset(),
            f"{seg.set_id}#{seg.index}",
            routing.guarantee_id,
            routing.seq if routing.seq is not None else seg.index,
            routing.final,
            None,
            m.timestamp()[1],
            int(created) if created.isdigit() else None,
        )
    name = (headers.get(schemas.SCHEMA_HEADER) or b"").decode()
    try:
        p = schemas.decode(name, m.value())
    except Exception:
        return None
    if name == domain.ORDER_LINE:
        group, seq, final = (
            domain.order_group(p["order_id"]),
            p["line_no"],
            p["line_no"] == p["line_count"] - 1,
        )
    else:
        group, seq, final = None, 0, False
    created_ms = round(p["created_at"].timestamp() * 1000)
    return Seen(
        dest, m.offset(), p["record_id"], group, seq, final, None, m.timestamp()[1], created_ms
    )


def expected(input_dir: Path, segment_bytes: int) -> list[Sent]:
    """What the sender was given, as the messages it must send (in `domain` terms)."""
    sent: list[Sent] = []
    for path in sorted(input_dir.glob("*.json")):
        lines = path.read_text().splitlines()
        sent.extend(Sent(*m) for m in domain.expected_from_lines(lines, segment_bytes))
    return sent


def ensure_stack(settings: RouterSettings, say: Callable[[str], None]) -> None:
    """Use Kafka and Redis if they answer; else start the local stack (ops/stack.sh up)."""

    def answers() -> bool:
        try:
            AdminClient(clients.admin_config(settings.kafka)).list_topics(timeout=3)
            return bool(redis_client(settings.redis).ping())
        except Exception:
            return False

    if answers():
        say(f"   Kafka {settings.kafka.bootstrap_servers} and Redis {settings.redis.url} answer")
        return
    if not STACK_SCRIPT.exists():
        raise RuntimeError(f"Kafka or Redis does not answer, and there is no {STACK_SCRIPT}")
    say("   starting the local stack (ops/stack.sh up) ...")
    subprocess.run([str(STACK_SCRIPT), "up"], check=True)


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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ops.spark_demo",
        description="Spark sender -> router -> Spark receiver, end to end, with a verdict "
        "(exit 1 if a guarantee broke).",
    )
    p.add_argument("--orders", type=int, default=200, help="Purchase orders (groups)")
    p.add_argument(
        "--documents",
        type=int,
        default=40,
        help="Documents (one message each; large ones go as segments)",
    )
    p.add_argument("--updates", type=int, default=600, help="Stock updates (ordinary)")
    p.add_argument("--max-lines", type=int, default=40)
    p.add_argument("--max-document-bytes", type=int, default=200_000)
    p.add_argument("--segment-bytes", type=int, default=4096)
    p.add_argument("--files", type=int, default=10, help="Input files, dropped one per second")
    p.add_argument("--send-units", type=int, default=2)
    p.add_argument("--receive-units", type=int, default=3)
    p.add_argument("--transfer-partitions", type=int, default=8)
    p.add_argument("--receive-queues", type=int, default=12)
    p.add_argument("--policy", choices=["share", "hold"], default="share")
    p.add_argument("--master", default="local[2]", help="(default: %(default)s)")
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--jars-dir", type=Path)
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE")
    p.add_argument("--timeout", type=float, default=600.0, help="Seconds for the whole flow")
    p.add_argument("--run-dir", type=Path, default=Path(".results/spark-demo"))
    p.add_argument("--keep", action="store_true", help="Keep the run's topics and tables")
    p.add_argument(
        "--config", type=Path, help="Router TOML configuration (default: $ROUTER_CONFIG)"
    )
    return p


def main(argv: list[str] | None = None, settings: RouterSettings | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)-7s %(name)s %(message)s"
    )
    base = settings or load_settings(args.config)
    run_id = f"spark-demo-{secrets.token_hex(3)}"
    console = Console()
    console.say(f"spark demo {run_id}: checking the stack")
    ensure_stack(base, console.say)
    if launched_by_spark_submit():
        console.say("   (under spark-submit: --master and the jars come from spark-submit)")
    spark = build_session(
        SparkOptions(
            master=args.master,
            app_name="router-spark-demo",
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
            jars_dir=args.jars_dir,
            conf=key_values(args.spark_conf, "--spark-conf"),
        )
    )
    spec = SparkDemoSpec(
        workload.BusinessWorkload(
            run_id,
            orders=args.orders,
            documents=args.documents,
            updates=args.updates,
            max_lines=args.max_lines,
            max_document_bytes=args.max_document_bytes,
        ),
        files=args.files,
        segment_bytes=args.segment_bytes,
        timeout_s=args.timeout,
    )
    pipeline_spec = PipelineSpec(
        send_units=args.send_units,
        receive_units=args.receive_units,
        transfer_partitions=args.transfer_partitions,
        receive_queues=args.receive_queues,
        busy_policy=args.policy,
    )
    try:
        result = run_spark_demo(
            spark, base, spec, pipeline_spec, args.run_dir / run_id, keep=args.keep, out=console
        )
    finally:
        spark.stop()
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
