"""The real-time sender: business records on an upstream Kafka topic -> groups on the send
queues, record by record, in Spark's real-time mode (`trigger(realTime=...)`).

    upstream topic (JSON lines) -> parse -> validate -> messages -> to_router_rows(in_order)
                                                    \\-> the rejects topic (the reason in a header)

A micro-batch sender adds to every record the wait for the batch that is running and the
batch's own fixed cost: seconds on a small machine (docs/explanation/spark-performance.md).
In real-time mode long-lived tasks read, map and write each record as it comes, and the
query checkpoints every `checkpoint_seconds`. Spark allows it only for stateless queries
from Kafka to Kafka: no shuffle, no sort, no `foreachBatch`, no file source or sink. So:

* **Groups without a shuffle.** A purchase order is one upstream record: its lines are
  exploded into its group's messages inside one task, in sequence, and written as they are
  (`to_router_rows(..., in_order=True)`). Spark's Kafka producer (idempotent, `acks=all`)
  keeps them in that order on the group's send-queue partition.
* **Rejects go to a Kafka topic** (`rejects_topic`): the input record as the value (cut to
  `max_payload_bytes`), the reason in the `reject-reason` header, the record's length in
  `record-bytes`; for a payload too large, its record ID and schema name and the payload's
  length. Nothing is dropped silently.
* **No segments**: cutting a payload into segments needs a batch DataFrame. A message whose
  payload is larger than `max_payload_bytes` is a reject that says so; send large documents
  through the micro-batch sender (`spark_jobs.sender`).
* **Creation time** (`created_at` in the payload, the `created-ms` header) is the upstream
  record's Kafka timestamp, so a record written again after a restart carries the same.
* **Restart**: the checkpoint logs the upstream offsets at every checkpoint interval; what
  the tasks wrote after the last one is written again by the next run (at least once, as
  with a micro-batch sender's batch interrupted by a kill): the send units and the receiver
  recognise a group member's copy by its sequence number, an ordinary record's by its ID.

Run: `router spark sender --source kafka --upstream TOPIC --real-time SECONDS
--rejects-topic TOPIC` (`spark_jobs.sender.main`); in code, `sender.start_realtime`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F

from router.contract.schemas import SCHEMA_HEADER
from spark_jobs import api, domain
from spark_jobs.streaming import KafkaSink, StreamJob
from spark_jobs.writing import RECORD_LIMIT

log = logging.getLogger("spark_jobs.realtime")

CREATED = "_created"  # read_upstream's column: the upstream record's Kafka timestamp
REJECT_HEADER = "reject-reason"
RECORD_BYTES_HEADER = "record-bytes"  # a refused record's (or payload's) length in bytes
# Room left under the record limit for the key and the router's headers.
DEFAULT_MAX_PAYLOAD_BYTES = RECORD_LIMIT - 64 * 1024
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}


@dataclass(frozen=True)
class RealTimeConfig:
    send_queues: tuple[str, ...]
    rejects_topic: str
    kafka: dict[str, str]  # Spark Kafka options (kafka.bootstrap.servers, ...)
    checkpoint: str
    checkpoint_seconds: float = 5.0  # the real-time batch: how often offsets are logged
    max_guarantee_id_bytes: int = 256
    delivery: str | None = None  # `guarantee-delivery` of every group; None: the router's
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES

    def __post_init__(self) -> None:
        if not self.send_queues:
            raise ValueError("no send queues")
        if not self.rejects_topic:
            raise ValueError("the real-time sender needs a rejects topic")
        if self.checkpoint_seconds <= 0:
            raise ValueError("checkpoint_seconds must be positive")
        if not 1024 <= self.max_payload_bytes <= RECORD_LIMIT:
            raise ValueError(f"max_payload_bytes must be in 1024..{RECORD_LIMIT}")


def read_upstream(
    spark: Any, topic: str, kafka: dict[str, str], starting_offsets: str = "earliest"
) -> Any:
    """Business records (`domain.INPUT_SCHEMA`) from the JSON values of `topic`, each with
    its text as `_line` and its Kafka timestamp as `_created`. A value that is not a record
    (not JSON, empty, no value at all) has `_corrupt_record` set or no `type`: a reject."""
    raw = (
        spark.readStream.format("kafka")
        .options(**kafka)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .load()
    )
    line = F.col("value").cast("string")
    return raw.select(
        F.from_json(line, domain.INPUT_SCHEMA, _JSON_OPTIONS).alias("r"),
        line.alias("_line"),
        F.col("timestamp").alias(CREATED),
    ).select("r.*", "_line", "_created")


def realtime_rows(messages: Any, config: RealTimeConfig) -> Any:
    """The Kafka sink's rows (topic, key, value, headers) for the sender's messages and
    rejects (`sender.sender_stream` over `read_upstream`'s records): each message to its
    send queue, in sequence, with the router's headers; each refused record to
    `rejects_topic` with its reason. One projection, no shuffle."""
    rows = messages
    too_large = F.octet_length("value") > F.lit(config.max_payload_bytes)
    reason = F.coalesce(
        F.col("reject_reason"),
        F.when(
            too_large,
            F.format_string(
                "payload of %d bytes is larger than %d: the real-time sender does not cut "
                "segments (send it through the micro-batch sender)",
                F.octet_length("value"),
                F.lit(config.max_payload_bytes),
            ),
        ),
    )
    rows = rows.withColumn("_reason", reason)
    ok = F.col("_reason").isNull()
    # A refused record is one row (`validate` keeps it whole): its text, cut to the payload
    # limit (a record of the rejects topic has the same limit), its length in a header. A
    # payload too large is one message (a document): its record ID and schema name, and
    # the payload's length.
    named = F.to_json(F.struct("record_id", "schema")).cast("binary")
    record = F.coalesce(F.col("record").cast("binary"), named)
    length = F.when(F.col("record").isNull(), F.octet_length("value")).otherwise(
        F.octet_length(record)
    )
    # One projection of the one source (real-time mode refuses a union of a source with
    # itself): a refused row becomes an ordinary message, with no router header, whose
    # topic is then the rejects topic.
    routed = api.to_router_rows(
        rows,
        group_id=F.when(ok, F.col("guarantee_id")),
        sequence="seq",
        final="final",
        payload=F.when(ok, F.col("value")).otherwise(
            F.substring(record, 1, config.max_payload_bytes)
        ),
        key="key",
        queues=config.send_queues,
        delivery=None if config.delivery is None else F.lit(config.delivery),
        headers={
            SCHEMA_HEADER: F.when(ok, F.col("schema")),
            domain.CREATED_HEADER: F.when(ok, F.col("created_ms")),
            REJECT_HEADER: F.col("_reason"),
            RECORD_BYTES_HEADER: F.when(~ok, length),
        },
        in_order=True,
        keep=("_reason",),
    )
    return routed.select(
        F.when(F.col("_reason").isNull(), F.col("topic"))
        .otherwise(F.lit(config.rejects_topic))
        .alias("topic"),
        "key",
        "value",
        "headers",
    )


def start(
    spark: Any, messages: Any, config: RealTimeConfig, name: str = "sender-realtime"
) -> StreamJob:
    """Start the real-time query on the sender's messages and rejects (`realtime_rows`);
    `sender.start_realtime` is the whole sender."""
    sink = KafkaSink(
        tuple(
            {
                **config.kafka,
                # Idempotent: a retried request never duplicates or reorders a group.
                "kafka.enable.idempotence": "true",
                "kafka.acks": "all",
            }.items()
        )
    )
    rows = realtime_rows(messages, config)
    job = StreamJob(spark, name, rows, sink, config.checkpoint, config.checkpoint_seconds)
    return job.start()
