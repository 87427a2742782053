"""The Spark sender: business records as they arrive -> groups on the send queues.

    read_files / read_rate / read_kafka -> validate -> to_messages -> to_kafka_rows -> Kafka
    (`sources`)                            (`records`; api.to_router_rows)
                                       \\-> rejects (JSON files, with the reason)

The job and its command line: `sender_stream` (messages and rejects in one stream, from
one read of the source), `SendBatch` (each micro-batch: rejects to files, then messages
to Kafka), `start`, `start_realtime` (`realtime`) and `main`. What it reads is in
`sources`, how a record becomes messages and Kafka rows in `records` (groups, Avro
payloads, headers, segments); their functions are re-exported here. `--delivery
complete` asks for whole-group delivery (`guarantee-delivery` on every group's messages).
Checkpointed: see `streaming` for what a restart guarantees.

Run: `router spark sender --input DIR --checkpoint DIR --rejects DIR` (`--help`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F

from router import contract
from spark_jobs import domain, realtime
from spark_jobs.records import (
    MESSAGE_COLUMNS,
    messages_and_rejects,
    to_kafka_rows,
    to_messages,
    validate,
)
from spark_jobs.session import (
    add_kafka_arguments,
    add_spark_arguments,
    build_session,
    kafka_options,
    key_values,
    router_settings,
    spark_options,
)
from spark_jobs.sources import parse_lines, rate_records, read_files, read_kafka, read_rate
from spark_jobs.streaming import StreamJob

__all__ = [
    "MESSAGE_COLUMNS",
    "SendBatch",
    "SenderConfig",
    "main",
    "parse_lines",
    "parser",
    "rate_records",
    "read_files",
    "read_kafka",
    "read_rate",
    "sender_stream",
    "start",
    "start_realtime",
    "to_kafka_rows",
    "to_messages",
    "validate",
]

log = logging.getLogger("spark_jobs.sender")


@dataclass(frozen=True)
class SenderConfig:
    send_queues: tuple[str, ...]
    kafka: dict[str, str]  # Spark Kafka options (kafka.bootstrap.servers, ...)
    checkpoint: str
    rejects: str
    segment_bytes: int = domain.DEFAULT_SEGMENT_BYTES
    max_guarantee_id_bytes: int = 256
    trigger_seconds: float = 1.0
    delivery: str | None = None  # `guarantee-delivery` of every group; None: the router's


def sender_stream(
    records: Any, config: SenderConfig, created: Any = None, extra_reason: Any = None
) -> Any:
    """Messages (`to_messages`' columns) and rejects (`record`, `reject_reason`) in one
    stream, told apart by `reject_reason`, from one read of the source
    (`records.messages_and_rejects`); `SendBatch` turns the messages into Kafka rows
    (`to_kafka_rows`) batch by batch. `created` (a timestamp column of `records`) dates the
    messages; by default the micro-batch's time. `extra_reason`: see `validate`."""
    return messages_and_rejects(
        records, config.max_guarantee_id_bytes, created=created, extra_reason=extra_reason
    )


# ---------------------------------------------------------------------- the sink


class SendBatch:
    """Writes one micro-batch, read once from the source (`sender_stream` is one projection)
    and held for the batch: rejects to `<rejects>/batch_id=N/` (replaced if the batch is
    repeated), then every message to Kafka. It keeps no count of its own (under Spark
    Connect it runs in the server's Python worker): what was sent is counted by `start`'s
    `observe()`, in the query's progress. (Not an `Observation` in here: inside
    `foreachBatch` one is never filled, not even with the connector's DataSource V2
    write, so its `get` would wait forever; measured on 4.2.0.)"""

    def __init__(self, config: SenderConfig) -> None:
        self.config = config

    def __call__(self, df: Any, batch_id: int) -> None:
        df = df.persist()
        try:
            counts = {
                row["rejected"]: row["n"]
                for row in df.groupBy(F.col("reject_reason").isNotNull().alias("rejected"))
                .agg(F.count("*").alias("n"))
                .collect()
            }
            n_rejects, n = counts.get(True, 0), counts.get(False, 0)
            if n_rejects:
                path = f"{self.config.rejects.rstrip('/')}/batch_id={batch_id}"
                df.where(df["reject_reason"].isNotNull()).select(
                    "record", "reject_reason"
                ).write.mode("overwrite").json(path)
                log.warning("batch %d: %d input records rejected (%s)", batch_id, n_rejects, path)
            if n:
                messages = df.where(df["reject_reason"].isNull()).select(*MESSAGE_COLUMNS)
                (
                    to_kafka_rows(
                        messages,
                        self.config.send_queues,
                        self.config.delivery,
                        self.config.segment_bytes,
                    )
                    .write.format("kafka")
                    .options(**self.config.kafka)
                    # Idempotent: a retried request never duplicates or reorders a group.
                    .option("kafka.enable.idempotence", "true")
                    .option("kafka.acks", "all")
                    .save()
                )
                log.info("batch %d: %d messages sent", batch_id, n)
        finally:
            df.unpersist()


def start(
    spark: Any,
    records: Any,
    config: SenderConfig,
    name: str = "sender",
    writer: SendBatch | None = None,
    created: Any = None,
    extra_reason: Any = None,
) -> StreamJob:
    """Start the sender on a stream of business records (through `writer`, by default a
    `SendBatch`). `job.metric("messages")` counts the messages it sent,
    `job.metric("rejected")` the records it refused (`observe`: in each committed
    micro-batch's progress). `created`, `extra_reason`: see `sender_stream`."""
    refused = F.col("reject_reason").isNotNull()
    stream = sender_stream(records, config, created, extra_reason).observe(
        "sender",
        F.count(F.when(~refused, 1)).alias("messages"),
        F.count(F.when(refused, 1)).alias("rejected"),
    )
    sink = writer if writer is not None else SendBatch(config)
    return StreamJob(spark, name, stream, sink, config.checkpoint, config.trigger_seconds).start()


def start_realtime(
    spark: Any, records: Any, config: realtime.RealTimeConfig, name: str = "sender-realtime"
) -> StreamJob:
    """Start the sender in Spark's real-time mode on `realtime.read_upstream`'s records:
    the same checks and messages as `start`, each record sent as it comes, dated by its
    upstream Kafka timestamp (`spark_jobs.realtime`)."""
    checks = SenderConfig(
        config.send_queues, config.kafka, config.checkpoint, "", 0, config.max_guarantee_id_bytes
    )
    messages = sender_stream(
        records, checks, created=F.col(realtime.CREATED), extra_reason=realtime.refusal(config)
    )
    return realtime.start(spark, messages, config, name)


# ---------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="router spark sender",
        description="Spark sender: business records -> groups on the router's send queues.",
    )
    p.add_argument("--source", choices=["files", "rate", "kafka"], default="files")
    p.add_argument("--input", help="Directory JSON-lines files are dropped into (--source files)")
    p.add_argument(
        "--upstream",
        help="Kafka topic whose values are the JSON records, read from its start (--source kafka)",
    )
    p.add_argument(
        "--real-time",
        type=float,
        metavar="SECONDS",
        help="Spark's real-time mode (--source kafka): each record sent as it comes, the "
        "checkpoint every SECONDS; refused records go to --rejects-topic, and no payload is "
        "cut into segments (spark_jobs.realtime)",
    )
    p.add_argument("--rejects-topic", help="Where refused records go with --real-time (Kafka)")
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--rows-per-second", type=int, default=10, help="(--source rate)")
    p.add_argument("--run-id", default="rate", help="Prefix of synthetic IDs (--source rate)")
    p.add_argument("--checkpoint", required=True, help="Checkpoint directory (any Hadoop path)")
    p.add_argument(
        "--rejects", help="Where refused input records go (JSON files; not with --real-time)"
    )
    p.add_argument(
        "--send-queues",
        help="Comma-separated send queues (default: the topology's)",
    )
    p.add_argument(
        "--segment-bytes",
        type=int,
        default=domain.DEFAULT_SEGMENT_BYTES,
        help="A payload larger than this (a large document) goes as segments of this size, "
        "the router's segment contract (default: %(default)s)",
    )
    p.add_argument(
        "--delivery",
        choices=contract.DELIVERIES,
        help="guarantee-delivery of every group (complete: whole-group delivery; default: "
        "no header, the router's routing.default_delivery decides)",
    )
    p.add_argument("--trigger-seconds", type=float, default=1.0)
    add_kafka_arguments(p)
    add_spark_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s %(message)s"
    )
    if args.source == "files" and not args.input:
        parser().error("--input is required with --source files")
    if args.source == "kafka" and not args.upstream:
        parser().error("--upstream is required with --source kafka")
    if args.real_time is not None:
        if args.source != "kafka":
            parser().error("--real-time needs --source kafka (Spark's real-time mode reads Kafka)")
        if not args.rejects_topic:
            parser().error("--rejects-topic is required with --real-time")
        lowered = any(
            kv.startswith(f"{realtime.MIN_BATCH_CONF}=") for kv in (args.spark_conf or [])
        )
        if args.real_time < realtime.MIN_BATCH_S and not lowered:
            parser().error(
                f"--real-time SECONDS must be at least {realtime.MIN_BATCH_S:g} (Spark's "
                f"{realtime.MIN_BATCH_CONF}; lower it with --spark-conf)"
            )
    elif not args.rejects:
        parser().error("--rejects is required (or --real-time with --rejects-topic)")
    if not domain.MIN_SEGMENT_BYTES <= args.segment_bytes <= domain.MAX_SEGMENT_BYTES:
        parser().error(
            f"--segment-bytes must be in {domain.MIN_SEGMENT_BYTES}..{domain.MAX_SEGMENT_BYTES}"
        )
    settings = router_settings(args)
    queues = (
        tuple(q for q in args.send_queues.split(",") if q)
        if args.send_queues
        else tuple(settings.topology.send_queues)
    )
    kafka = kafka_options(settings.kafka, key_values(args.kafka_option, "--kafka-option"))
    spark = build_session(spark_options(args, "router-spark-sender"))
    if args.real_time is not None:
        rt = realtime.RealTimeConfig(
            send_queues=queues,
            rejects_topic=args.rejects_topic,
            kafka=kafka,
            checkpoint=args.checkpoint,
            checkpoint_seconds=args.real_time,
            max_guarantee_id_bytes=settings.routing.max_guarantee_id_bytes,
            delivery=args.delivery,
        )
        job = start_realtime(spark, realtime.read_upstream(spark, args.upstream, kafka), rt)
        log.info("sending %s to %s in real-time mode", args.upstream, ",".join(queues))
        return job.run_until_signalled(args.stop_file)
    config = SenderConfig(
        send_queues=queues,
        kafka=kafka,
        checkpoint=args.checkpoint,
        rejects=args.rejects,
        segment_bytes=args.segment_bytes,
        max_guarantee_id_bytes=settings.routing.max_guarantee_id_bytes,
        trigger_seconds=args.trigger_seconds,
        delivery=args.delivery,
    )
    created = reason = None
    if args.source == "files":
        records = read_files(spark, args.input, args.max_files_per_trigger)
    elif args.source == "kafka":
        records, created, reason = read_kafka(spark, args.upstream, kafka)
    else:
        records = read_rate(spark, args.rows_per_second, args.run_id)
    job = start(spark, records, config, created=created, extra_reason=reason)
    log.info("sending to %s via %s", ",".join(queues), settings.kafka.bootstrap_servers)
    return job.run_until_signalled(args.stop_file)


if __name__ == "__main__":
    sys.exit(main())
