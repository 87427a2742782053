"""The Spark sender: business records as they arrive -> groups on the send queues.

    read_files / read_rate -> validate -> to_messages -> to_kafka_rows -> Kafka (format "kafka")
                                                         (api.to_router_rows)
                                      \\-> rejects (JSON, with the reason)

* Input: a directory where JSON-lines files are dropped over time (move finished files
  in; names starting with `.` or `_` are ignored), or Spark's rate source for load. A
  line that is not a valid record goes to the rejects output, verbatim, with the reason.
* Groups: a purchase order's lines form a group; the guarantee ID comes from the business
  key, `guarantee-seq` is the position, and `guarantee-final` is true on the last message
  (see `domain`). A document is one ordinary message; one larger than `--segment-bytes`
  goes as segments of the router's contract (`router.contract.segments`, a group of its own).
* Kafka: the send queue is a stable hash of the key (the guarantee ID, or the record ID
  of an ordinary message) over the send queues, and the key keeps a group on one
  partition, so the send units see it in order. Each micro-batch is written through
  `api.to_router_rows`: repartitioned by group and sorted by sequence, so one task
  writes a whole group in order (with `spark.speculation` off, see `session`).
  Payloads are Avro (`to_avro` with the
  schemas in `schemas/demo/`), routing metadata is in headers (`router.contract`), plus
  a `schema` header naming the payload's Avro schema. `--delivery complete` asks for
  whole-group delivery (`guarantee-delivery` on every group's messages).
* Checkpointed: see `streaming` for what a restart guarantees.

Run: `router spark sender --input DIR --checkpoint DIR --rejects DIR` (`--help`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.avro.functions import to_avro

from router import contract
from router.contract.schemas import SCHEMA_HEADER
from spark_jobs import api, domain, realtime
from spark_jobs.session import (
    add_kafka_arguments,
    add_spark_arguments,
    build_session,
    kafka_options,
    key_values,
    router_settings,
    spark_options,
)
from spark_jobs.streaming import StreamJob

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


# ---------------------------------------------------------------------- sources


def read_files(spark: Any, directory: str, max_files_per_trigger: int | None = None) -> Any:
    """Lines of the JSON-lines files dropped into `directory` over time."""
    reader = spark.readStream.format("text")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return parse_lines(reader.load(directory))


def parse_lines(lines: Any) -> Any:
    """JSON lines (column `value`) -> business records (`domain.INPUT_SCHEMA`), each with
    its line as `_line`; a line that is not a record has `_corrupt_record` set."""
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    return (
        lines.where(F.trim("value") != "")
        .select(
            F.from_json("value", domain.INPUT_SCHEMA, options).alias("r"),
            F.col("value").alias("_line"),
        )
        .select("r.*", "_line")
    )


def read_kafka(spark: Any, topic: str, kafka: dict[str, str]) -> tuple[Any, Any, Any]:
    """Business records from the JSON values of a Kafka topic, for `start` (micro-batches):
    the records, their creation time (the upstream record's timestamp) and the reason to
    refuse a value that is not one record (not UTF-8, two JSON values), as `start`'s
    `records`, `created` and `extra_reason`. A large document goes in segments, as from
    files; `realtime.read_upstream` is the reader."""
    records = realtime.read_upstream(spark, topic, kafka, real_time=False)
    return records, F.col(realtime.CREATED), F.col(realtime.UPSTREAM_REASON)


def read_rate(
    spark: Any, rows_per_second: int, run_id: str, max_lines: int = 40, documents: bool = True
) -> Any:
    """Synthetic business records from Spark's rate source, for load (`rate_records`)."""
    rate = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
    return rate_records(rate, run_id, max_lines, documents)


def rate_records(values: Any, run_id: str, max_lines: int = 40, documents: bool = True) -> Any:
    """Business records (`domain.INPUT_SCHEMA`), one per row of `values` (a `value`
    column: the rate source, or `spark.range(n)` renamed to recompute what it made): per
    10 rows, five stock updates, four purchase orders of 1..`max_lines` lines and one
    document of 1..256 KiB (without `documents`, a fifth purchase order instead)."""
    v = F.col("value")
    ident = F.concat(F.lit(f"{run_id}-"), v.cast("string"))
    bucket = F.pmod(v, F.lit(10))
    spread = F.pmod(F.xxhash64(v), F.lit(1_000_003))
    n_lines = (spread % max_lines + 1).cast("int")
    lines = F.transform(
        F.sequence(F.lit(1), n_lines),
        lambda i: F.struct(
            F.format_string("SKU-%04d", F.pmod(spread + i * 7919, F.lit(10_000))).alias("sku"),
            (F.pmod(spread + i, F.lit(20)) + 1).cast("int").alias("quantity"),
            (F.pmod(spread * i, F.lit(99_901)) + 99).cast("bigint").alias("unit_price_cents"),
        ),
    )
    # 64 hex characters (32 bytes) per repetition.
    content = F.unhex(F.repeat(F.sha2(ident, 256), (spread % 8192 + 32).cast("int")))
    kind = (
        F.when(bucket < 5, F.lit(domain.STOCK_UPDATE))
        .when((bucket < 9) | F.lit(not documents), F.lit(domain.PURCHASE_ORDER))
        .otherwise(F.lit(domain.DOCUMENT))
    )
    return values.select(
        kind.alias("type"),
        ident.alias("order_id"),
        F.concat(F.lit("C-"), (spread % 500).cast("string")).alias("customer_id"),
        F.lit("EUR").alias("currency"),
        lines.alias("lines"),
        ident.alias("document_id"),
        F.concat(ident, F.lit(".pdf")).alias("name"),
        F.when(kind == domain.DOCUMENT, F.base64(content)).alias("content_base64"),
        ident.alias("update_id"),
        F.format_string("SKU-%04d", spread % 10_000).alias("sku"),
        F.concat(F.lit("WH-"), (spread % 5).cast("string")).alias("warehouse"),
        ((spread % 41) - 20).cast("int").alias("delta"),
        F.lit(None).cast("string").alias("_corrupt_record"),
        F.lit(None).cast("string").alias("_line"),
    )


# ---------------------------------------------------------------------- transformations


def validate(records: Any, max_guarantee_id_bytes: int = 256, extra: Any = None) -> Any:
    """Adds `reject_reason`: null for a record the sender can send, else why not (`extra`:
    a reason of the caller's, a column over the records, checked first)."""

    def blank(name: str) -> Any:
        c = F.col(name)
        return c.isNull() | (F.length(c) == 0)

    t = F.col("type")
    bad_line = F.exists(
        F.col("lines"),
        lambda line: (
            line.isNull()
            | line["sku"].isNull()
            | line["quantity"].isNull()
            | line["unit_price_cents"].isNull()
        ),
    )
    gid = F.when(
        t == domain.PURCHASE_ORDER, F.concat(F.lit(domain.ORDER_PREFIX), F.col("order_id"))
    )
    reason = (
        F.when(F.col("_corrupt_record").isNotNull(), F.lit("malformed JSON line"))
        .when(t.isNull() | ~t.isin(*domain.RECORD_TYPES), F.lit("unknown record type"))
        .when(
            (t == domain.PURCHASE_ORDER)
            & (
                blank("order_id")
                | blank("customer_id")
                | F.col("lines").isNull()
                | (F.size("lines") == 0)
                | bad_line
            ),
            F.lit("a purchase order needs order_id, customer_id and complete lines"),
        )
        .when(
            (t == domain.DOCUMENT)
            & (blank("document_id") | F.col("name").isNull() | F.col("content_base64").isNull()),
            F.lit("a document needs document_id, name and content_base64"),
        )
        .when(
            (t == domain.DOCUMENT) & F.try_to_binary("content_base64", F.lit("base64")).isNull(),
            F.lit("content_base64 is not base64"),
        )
        .when(
            (t == domain.STOCK_UPDATE)
            & (
                blank("update_id")
                | F.col("sku").isNull()
                | F.col("warehouse").isNull()
                | F.col("delta").isNull()
            ),
            F.lit("a stock update needs update_id, sku, warehouse and delta"),
        )
        .when(
            F.octet_length(gid) > max_guarantee_id_bytes,
            F.lit(f"business key too long for a guarantee ID (> {max_guarantee_id_bytes} bytes)"),
        )
    )
    if extra is not None:
        reason = F.coalesce(extra, reason)
    return records.withColumn("reject_reason", reason)


MESSAGE_COLUMNS = (
    "guarantee_id",
    "seq",
    "final",
    "key",
    "record_id",
    "schema",
    "value",
    "created_ms",
)


def to_messages(records: Any) -> Any:
    """One row per message, in send order within each record: guarantee_id, seq, final,
    key, record_id, schema, value (Avro bytes), created_ms. `records` must be valid. A
    document is one message, however large: `to_kafka_rows` cuts it into segments."""
    return _messages(_exploded(records, F.lit(True)), F.lit(True))


def _exploded(records: Any, valid: Any) -> Any:
    """Each record once per message it becomes (`pos`: a purchase order's line; anything
    else, or a record that is not `valid`, once), in one projection: a source read once."""
    lines = F.when(valid & (F.col("type") == domain.PURCHASE_ORDER), F.size("lines"))
    return records.select(
        "*", F.explode(F.sequence(F.lit(0), F.coalesce(lines, F.lit(1)) - 1)).alias("pos")
    )


def _messages(rows: Any, valid: Any, *extra: Any, created: Any = None) -> Any:
    """`_exploded` rows -> the message columns (MESSAGE_COLUMNS; null where not `valid`:
    a refused record is never encoded), and `extra` columns. `created` dates the messages
    (`created_at`, the `created-ms` header)."""
    # By default the micro-batch's timestamp: the same when the batch is repeated.
    now = F.current_timestamp() if created is None else created
    t = F.col("type")
    is_order, is_document = t == domain.PURCHASE_ORDER, t == domain.DOCUMENT
    pos, n = F.col("pos"), F.size("lines")
    line = F.col("lines")[pos]
    order_id = F.col("order_id")
    line_id = F.concat_ws("/", order_id, pos.cast("string"))
    order_line = F.struct(
        line_id.alias("record_id"),
        order_id,
        F.col("customer_id"),
        pos.cast("int").alias("line_no"),
        n.cast("int").alias("line_count"),
        line["sku"].alias("sku"),
        line["quantity"].alias("quantity"),
        line["unit_price_cents"].alias("unit_price_cents"),
        F.coalesce("currency", F.lit("EUR")).alias("currency"),
        now.alias("created_at"),
    )
    document = F.struct(
        F.col("document_id").alias("record_id"),
        F.col("document_id"),
        F.col("name"),
        now.alias("created_at"),
        F.try_to_binary("content_base64", F.lit("base64")).alias("content"),
    )
    update = F.struct(
        F.col("update_id").alias("record_id"),
        F.col("sku"),
        F.col("warehouse"),
        F.col("delta"),
        now.alias("created_at"),
    )
    gid = F.when(is_order, F.concat(F.lit(domain.ORDER_PREFIX), order_id))
    record_id = (
        F.when(is_order, line_id)
        .when(is_document, F.col("document_id"))
        .otherwise(F.col("update_id"))
    )
    return rows.select(
        gid.alias("guarantee_id"),
        F.when(is_order, pos.cast("int")).alias("seq"),
        (is_order & (pos == n - 1)).alias("final"),
        F.coalesce(gid, record_id).alias("key"),
        record_id.alias("record_id"),
        F.when(is_order, F.lit(domain.ORDER_LINE))
        .when(is_document, F.lit(domain.DOCUMENT_MESSAGE))
        .otherwise(F.lit(domain.STOCK))
        .alias("schema"),
        F.when(~valid, F.lit(None))
        .when(is_order, to_avro(order_line, domain.avro_json(domain.ORDER_LINE)))
        .when(is_document, to_avro(document, domain.avro_json(domain.DOCUMENT_MESSAGE)))
        .otherwise(to_avro(update, domain.avro_json(domain.STOCK)))
        .alias("value"),
        F.unix_millis(now).alias("created_ms"),
        *extra,
    )


def to_kafka_rows(
    messages: Any,
    send_queues: tuple[str, ...],
    delivery: str | None = None,
    segment_bytes: int = domain.DEFAULT_SEGMENT_BYTES,
) -> Any:
    """The columns of Spark's Kafka sink (topic, key, value, headers) through
    `api.to_router_rows`: one task per group, in sequence; a `schema` header names the
    payload's Avro schema and a `created-ms` header its creation time; `delivery`
    (`stream`, `complete`) every group's delivery; a payload larger than `segment_bytes`
    (a large document) goes as segments of the router's contract."""
    return api.to_router_rows(
        messages,
        group_id="guarantee_id",
        sequence="seq",
        final="final",
        payload="value",
        key="key",
        queues=send_queues,
        delivery=None if delivery is None else F.lit(delivery),
        headers={SCHEMA_HEADER: "schema", domain.CREATED_HEADER: "created_ms"},
        segment_bytes=segment_bytes,
    )


def sender_stream(
    records: Any, config: SenderConfig, created: Any = None, extra_reason: Any = None
) -> Any:
    """Messages (`to_messages`' columns) and rejects (`record`, `reject_reason`) in one
    stream, told apart by `reject_reason`, from one read of the source; `SendBatch` turns
    the messages into Kafka rows (`to_kafka_rows`) batch by batch. `created` (a timestamp
    column of `records`) dates the messages; by default the micro-batch's time.
    `extra_reason`: see `validate`."""
    checked = validate(records, config.max_guarantee_id_bytes, extra_reason)
    valid = F.col("reject_reason").isNull()
    fields = [c for c in checked.columns if not c.startswith("_") and c != "reject_reason"]
    raw = F.coalesce(F.col("_line"), F.to_json(F.struct(*fields)))
    return _messages(
        _exploded(checked, valid),
        valid,
        F.when(~valid, raw).alias("record"),
        "reject_reason",
        created=created,
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
