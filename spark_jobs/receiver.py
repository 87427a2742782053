"""The Spark receiver: receive queues -> checked, reassembled groups in Parquet.

    read_queues -> parse -> check_groups -> outputs.output_rows -> Parquet (file sink)
    (api.read_router_queues)  (api.complete_groups: transformWithState, `groups.step`)

* Reads one or more receive queues through `api.read_router_queues` (`read_committed`,
  with headers; every Kafka source option passes through).
* `parse` decodes the payload with `from_avro` (the Avro schema named by the `schema`
  header) and checks the routing headers against the payload's own group and position;
  a message that fails (undecodable, headers contradicting the payload) is a violation.
* `check_groups` keeps one state per guarantee ID (an ordinary record's copies are
  dropped in the JVM and counted, `api.complete_groups`): every
  message of a group from one queue, in sequence, none missing; see `groups`. An open
  group's members are a list state, appended as they come; its metadata a value state
  (`group_state.GroupProcessor`). Its
  timeouts are event time (the payload's `created_at`, with a watermark `lateness_ms`
  behind the newest one read), so verdicts do not depend on when the receiver ran. A
  group sent with whole-group delivery that one micro-batch holds entirely never enters
  the state (`groups`, "Whole groups").
* Output: one Parquet dataset written by Spark's file sink, partitioned by `output`:
  `groups` (purchase orders with their lines, documents reassembled and checked against
  their SHA-256), `records` (ordinary records), `duplicates` (copies of messages already
  received: a repeated send, not a broken guarantee), `violations` (every message that
  breaks a guarantee or cannot be read, with the reason; expected empty). See `outputs`.
* Checkpointed: the Kafka offsets, the watermark, the group states and their timers are
  in the checkpoint (not resumable from a checkpoint of the former
  `applyInPandasWithState` step: README, "Stopping, restarting"), and the sink's log
  commits each micro-batch once, so a restarted receiver (after a clean stop or a
  crash) loses nothing and its readers see nothing twice.

Run: `router spark receiver --output DIR --checkpoint DIR` (`--help`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from router.contract.priority import band_topics
from router.contract.schemas import SCHEMA_HEADER
from spark_jobs import api, domain, outputs
from spark_jobs.session import (
    add_kafka_arguments,
    add_spark_arguments,
    build_session,
    kafka_options,
    key_values,
    router_settings,
    spark_options,
)
from spark_jobs.streaming import FileSink, StreamJob

log = logging.getLogger("spark_jobs.receiver")


@dataclass(frozen=True)
class ReceiverConfig:
    receive_queues: tuple[str, ...]
    kafka: dict[str, str]  # Spark Kafka options (kafka.bootstrap.servers, ...)
    checkpoint: str
    output: str
    group_timeout_ms: int = 300_000
    dedupe_horizon_ms: int = 600_000
    lateness_ms: int = 60_000  # how far behind the newest creation time the watermark is
    trigger_seconds: float = 1.0
    max_offsets_per_trigger: int | None = None
    starting_offsets: str = "earliest"
    # Any other option of Spark's Kafka source (groupIdPrefix, minPartitions, ...).
    source_options: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------- source


def read_queues(spark: Any, config: ReceiverConfig) -> Any:
    """The receive queues through `api.read_router_queues`: `read_committed`, headers,
    and every option of `config.kafka` and `config.source_options` passed through."""
    options: dict[str, Any] = {"startingOffsets": config.starting_offsets, **config.kafka}
    if config.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = config.max_offsets_per_trigger
    options.update(config.source_options)
    return api.read_router_queues(spark, config.receive_queues, **options)


# ---------------------------------------------------------------------- transformations


def parse(messages: Any) -> Any:
    """Messages with their routing headers (`api.read_router_queues`) -> the same, with
    the demo domain's payload decoded: `record_id`, `schema`, `created_at`, and `problem`
    saying why a message cannot go on (null if it can). A segment (a piece of a large
    document) is not decoded: its message is, once `check_groups` has reassembled it
    (`outputs`); its creation time is its `created-ms` header."""
    permissive = {"mode": "PERMISSIVE"}
    schema = api.header_value(SCHEMA_HEADER)
    whole = F.col("segment_id").isNull()

    def decode(name: str) -> Any:
        return F.when(
            whole & (schema == name),
            from_avro(F.col("value"), domain.avro_json(name), permissive),
        )

    df = messages.select(
        "*",
        schema.alias("schema"),
        decode(domain.ORDER_LINE).alias("po"),
        decode(domain.DOCUMENT_MESSAGE).alias("doc"),
        decode(domain.STOCK).alias("stock"),
    )
    po, doc, stock = F.col("po"), F.col("doc"), F.col("stock")
    created_header = api.header_value(domain.CREATED_HEADER).try_cast("bigint")
    df = df.select(
        "*",
        F.coalesce(po["record_id"], doc["record_id"], stock["record_id"]).alias("record_id"),
        F.concat(F.lit(domain.ORDER_PREFIX), po["order_id"]).alias("body_group"),
        po["line_no"].alias("body_seq"),
        po["line_count"].alias("body_count"),
        F.coalesce(
            po["created_at"],
            doc["created_at"],
            stock["created_at"],
            F.timestamp_millis(created_header),
        ).alias("created_at"),
    )
    gid, body_group, body_seq = F.col("guarantee_id"), F.col("body_group"), F.col("body_seq")
    last = body_seq == F.col("body_count") - 1
    problem = (
        F.when(~whole, F.lit(None).cast("string"))
        .when(F.col("value").isNull(), F.lit("undecodable: no value"))
        .when(F.col("schema").isNull(), F.lit(f"undecodable: no {SCHEMA_HEADER!r} header"))
        .when(
            ~F.col("schema").isin(*domain.PAYLOAD_SCHEMAS.values()),
            F.concat(F.lit("undecodable: unknown schema "), F.col("schema")),
        )
        .when(
            F.col("record_id").isNull(),
            F.concat(F.lit("undecodable: not a valid "), F.col("schema")),
        )
        .when(
            gid.isNull() & body_group.isNotNull(),
            F.concat(
                F.lit("header mismatch: no guarantee-id, the payload is of group "), body_group
            ),
        )
        .when(
            gid.isNotNull() & (body_group.isNull() | (gid != body_group)),
            F.concat(
                F.lit("header mismatch: guarantee-id "),
                gid,
                F.lit(", the payload is of group "),
                F.coalesce(body_group, F.lit("(none)")),
            ),
        )
        .when(
            gid.isNotNull() & F.col("seq").isNull(),
            F.concat(
                F.lit("missing or malformed guarantee-seq: "),
                F.coalesce(F.col("raw_seq"), F.lit("(none)")),
            ),
        )
        .when(
            gid.isNotNull() & (F.col("seq") != body_seq),
            F.format_string(
                "header mismatch: guarantee-seq %s, the payload is at position %s",
                F.col("seq"),
                body_seq,
            ),
        )
        .when(
            gid.isNotNull() & (F.col("final") != last),
            F.format_string(
                "header mismatch: guarantee-final %s on position %s of %s",
                F.col("final"),
                body_seq,
                F.col("body_count"),
            ),
        )
    )
    decoded = ("po", "doc", "stock", "body_group", "body_seq", "body_count")
    return df.select("*", problem.alias("problem")).drop(*decoded)


def check_groups(parsed: Any, config: ReceiverConfig) -> Any:
    """Parsed messages -> outcomes (OUTCOME_SCHEMA), one state per group, in event time:
    the payload's `created_at` (the Kafka timestamp if undecodable)."""
    return api.complete_groups(
        parsed,
        record_id="record_id",
        schema="schema",
        problem="problem",
        created_at=F.coalesce("created_at", "timestamp"),
        group_timeout_ms=config.group_timeout_ms,
        dedupe_horizon_ms=config.dedupe_horizon_ms,
        lateness_ms=config.lateness_ms,
    )


def receiver_stream(kafka: Any, config: ReceiverConfig) -> Any:
    """Kafka records -> every outcome, with the micro-batch's time as `received_at`."""
    checked = check_groups(parse(kafka), config)
    return checked.withColumn("received_at", F.current_timestamp())


# ---------------------------------------------------------------------- the output


def start(spark: Any, config: ReceiverConfig, name: str = "receiver") -> StreamJob:
    """Start the receiver on the configured receive queues, into Spark's file sink at
    `config.output` (see `outputs`). `job.metric("messages")` counts the messages it
    accounted for (`observe`), `job.metric("groups")` etc. the rows per output."""
    rows = outputs.output_rows(receiver_stream(read_queues(spark, config), config))
    observed_name, metrics = outputs.counts(rows)
    return StreamJob(
        spark,
        name,
        rows.observe(observed_name, *metrics),
        FileSink(config.output, "parquet", ("output",)),
        config.checkpoint,
        config.trigger_seconds,
    ).start()


# ---------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="router spark receiver",
        description="Spark receiver: receive queues -> checked, reassembled groups (Parquet).",
    )
    p.add_argument("--output", required=True, help="Parquet outputs go here (any Hadoop path)")
    p.add_argument("--checkpoint", required=True, help="Checkpoint directory (any Hadoop path)")
    p.add_argument(
        "--receive-queues",
        help="Comma-separated receive queues (default: the topology's, with their priority "
        "band topics)",
    )
    p.add_argument(
        "--group-timeout-seconds",
        type=float,
        default=300.0,
        help="A group with no new message for this long (in creation time) is reported "
        "incomplete (default: %(default)s, the router's default TTL)",
    )
    p.add_argument(
        "--dedupe-horizon-seconds",
        type=float,
        default=600.0,
        help="How long (in creation time) a finished group is remembered to recognise "
        "copies of its members (default: %(default)s; an ordinary record's copies are "
        "recognised within --lateness-seconds of its creation time)",
    )
    p.add_argument(
        "--lateness-seconds",
        type=float,
        default=60.0,
        help="The watermark trails the newest creation time read by this much; an older "
        "message is dropped, counted and logged (default: %(default)s)",
    )
    p.add_argument("--starting-offsets", default="earliest", help="For a new checkpoint")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument(
        "--source-option",
        action="append",
        metavar="KEY=VALUE",
        help="Any option of Spark's Kafka source, passed unchanged (groupIdPrefix, "
        "minPartitions, maxTriggerDelay, kafka.*, ...); repeatable.",
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
    settings = router_settings(args)
    queues = (
        tuple(q for q in args.receive_queues.split(",") if q)
        if args.receive_queues
        else tuple(
            band
            for q in settings.topology.receive_queues
            for band in band_topics(q, settings.priority.bands)
        )
    )
    config = ReceiverConfig(
        receive_queues=queues,
        kafka=kafka_options(settings.kafka, key_values(args.kafka_option, "--kafka-option")),
        checkpoint=args.checkpoint,
        output=args.output,
        group_timeout_ms=int(args.group_timeout_seconds * 1000),
        dedupe_horizon_ms=int(args.dedupe_horizon_seconds * 1000),
        lateness_ms=int(args.lateness_seconds * 1000),
        trigger_seconds=args.trigger_seconds,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        starting_offsets=args.starting_offsets,
        source_options=key_values(args.source_option, "--source-option"),
    )
    spark = build_session(spark_options(args, "router-spark-receiver"))
    job = start(spark, config)
    log.info("receiving from %s via %s", ",".join(queues), settings.kafka.bootstrap_servers)
    return job.run_until_signalled(args.stop_file)


if __name__ == "__main__":
    sys.exit(main())
