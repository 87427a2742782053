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
  fit one Kafka record), the reason in the `reject-reason` header, the record's length in
  `record-bytes`. Besides the sender's own checks, a value that is not UTF-8 or that holds
  more than one JSON value is refused (`read_upstream`). Nothing is dropped silently.
* **No segments**: cutting a payload into segments needs a batch DataFrame. A record any of
  whose messages could be a Kafka record larger than `max_record_bytes` is refused whole
  (`refusal`: a purchase order never loses one line); send such records through the
  micro-batch sender (`spark_jobs.sender`).
* **Slots**: each upstream partition holds a task slot for the job's life; `read_upstream`
  refuses a topic with more partitions than the session has slots.
* **Creation time** (`created_at` in the payload, the `created-ms` header) is the upstream
  record's Kafka timestamp, so a record written again after a restart carries the same.
* **Restart**: the checkpoint logs the upstream offsets at every checkpoint interval; what
  the tasks wrote after the last one is written again by the next run (at least once, as
  with a micro-batch sender's batch interrupted by a kill): the receiver recognises the
  copies (a group member's by its group and sequence number, an ordinary record's by its ID).

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
from spark_jobs.session import is_connect
from spark_jobs.streaming import KafkaSink, StreamJob
from spark_jobs.writing import RECORD_LIMIT

log = logging.getLogger("spark_jobs.realtime")

CREATED = "_created"  # read_upstream's column: the upstream record's Kafka timestamp
UPSTREAM_REASON = "_upstream_reason"  # read_upstream's column: why a value is no record
REJECT_HEADER = "reject-reason"
RECORD_BYTES_HEADER = "record-bytes"  # a refused record's length in bytes
MIN_BATCH_CONF = "spark.sql.streaming.realTimeMode.minBatchDuration"
MIN_BATCH_S = 5.0  # Spark's default for it
# Room for a record's fixed fields and the router's headers in `refusal`'s bound: the
# headers' names and small values, the Avro encoding's lengths and numbers, Kafka's
# record overhead (measured well under 1 KiB).
OVERHEAD_BYTES = 2048
REJECT_KEY_BYTES = 1024  # a refused record's key (its business key) is cut to this
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
# A JSON text with its string literals emptied, then a closing brace followed by anything
# a single JSON value cannot have there: a second record in the same Kafka value.
# (The "unrolled" form, possessive: Java's regex recurses once per character on an
# alternation inside a repetition, which overflows the stack on a long string.)
_STRINGS = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_TRAILING = r"\}\s*[^\s,\]\}]"


@dataclass(frozen=True)
class RealTimeConfig:
    send_queues: tuple[str, ...]
    rejects_topic: str
    kafka: dict[str, str]  # Spark Kafka options (kafka.bootstrap.servers, ...)
    checkpoint: str
    checkpoint_seconds: float = MIN_BATCH_S  # the real-time batch: how often offsets are logged
    max_guarantee_id_bytes: int = 256
    delivery: str | None = None  # `guarantee-delivery` of every group; None: the router's
    # The largest Kafka record (key, value, headers) a message may make: the producer's
    # max.request.size. A record any of whose messages could be larger is refused whole.
    max_record_bytes: int = RECORD_LIMIT

    def __post_init__(self) -> None:
        if not self.send_queues:
            raise ValueError("no send queues")
        if not self.rejects_topic:
            raise ValueError("the real-time sender needs a rejects topic")
        if self.checkpoint_seconds <= 0:
            raise ValueError("checkpoint_seconds must be positive")
        if not 4 * OVERHEAD_BYTES <= self.max_record_bytes <= RECORD_LIMIT:
            raise ValueError(f"max_record_bytes must be in {4 * OVERHEAD_BYTES}..{RECORD_LIMIT}")


def read_upstream(
    spark: Any,
    topic: str,
    kafka: dict[str, str],
    starting_offsets: str = "earliest",
    real_time: bool = True,
) -> Any:
    """Business records (`domain.INPUT_SCHEMA`) from the JSON values of `topic`, each with
    its text as `_line`, its Kafka timestamp as `_created`, and `_upstream_reason` for a
    value that is not one record: not UTF-8, or more than one JSON value (Spark's JSON
    parser would read the first and drop the rest). A value that is not JSON, empty, or
    none at all has `_corrupt_record` set or no `type`. Every one of them is a reject.
    For real-time mode (`real_time`), refuses a topic with more partitions than the
    session has task slots: it holds a slot per partition, and a partition without one
    would never be read."""
    if real_time:
        _check_slots(spark, topic, kafka)
    raw = (
        spark.readStream.format("kafka")
        .options(**kafka)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .load()
    )
    line = F.col("value").cast("string")
    bare = F.regexp_replace(line, _STRINGS, '""')
    reason = F.when(
        F.col("value") != F.encode(line, "UTF-8"), F.lit("the value is not UTF-8")
    ).when(
        # The raw text first: emptying the strings can remove a match, never add one, so
        # a text without one needs no emptying (almost every record: the emptying copy of
        # each value was a twentieth of the driver JVM's CPU in `make spark-bench`).
        F.regexp_like(line, F.lit(_TRAILING)) & F.regexp_like(bare, F.lit(_TRAILING)),
        F.lit("more than one JSON value in one Kafka record (send one record per value)"),
    )
    return raw.select(
        F.from_json(line, domain.INPUT_SCHEMA, _JSON_OPTIONS).alias("r"),
        line.alias("_line"),
        F.col("timestamp").alias(CREATED),
        reason.alias(UPSTREAM_REASON),
    ).select("r.*", "_line", CREATED, UPSTREAM_REASON)


def refusal(config: RealTimeConfig) -> Any:
    """The real-time sender's own reasons to refuse a record, over `read_upstream`'s
    columns (for `records.validate`): `_upstream_reason`, or a record one of whose messages
    could be a Kafka record larger than `max_record_bytes`. It cannot cut segments, and a
    purchase order is refused whole, never one line of it. The bound counts each string
    the message repeats (in its key, payload and headers) and `OVERHEAD_BYTES`."""

    def size(name: str) -> Any:
        return F.coalesce(F.octet_length(name), F.lit(0))

    t = F.col("type")
    longest_sku = F.coalesce(
        F.array_max(F.transform("lines", lambda line: F.octet_length(line["sku"]))), F.lit(0)
    )
    content = F.coalesce(
        F.octet_length(F.try_to_binary("content_base64", F.lit("base64"))), F.lit(0)
    )
    bound = (
        F.when(
            t == domain.PURCHASE_ORDER,
            4 * size("order_id") + size("customer_id") + size("currency") + longest_sku,
        )
        .when(t == domain.DOCUMENT, 3 * size("document_id") + size("name") + content)
        .otherwise(3 * size("update_id") + size("sku") + size("warehouse"))
        + OVERHEAD_BYTES
    )
    too_large = F.format_string(
        "a message of this record could take %d bytes, more than %d: the real-time sender "
        "does not cut segments (send it through the micro-batch sender)",
        bound,
        F.lit(config.max_record_bytes),
    )
    return F.coalesce(
        F.col(UPSTREAM_REASON), F.when(bound > F.lit(config.max_record_bytes), too_large)
    )


def _check_slots(spark: Any, topic: str, kafka: dict[str, str]) -> None:
    if is_connect(spark):  # the server's slots and its Kafka client: not seen from here
        return
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.Properties()
    for key, value in kafka.items():
        if key.startswith("kafka."):
            props.setProperty(key[len("kafka.") :], value)
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    try:
        names = jvm.java.util.Collections.singleton(topic)
        described = admin.describeTopics(names).allTopicNames().get()
        partitions = int(described.get(topic).partitions().size())
    finally:
        admin.close()
    slots = int(spark.sparkContext.defaultParallelism)
    if partitions > slots:
        raise ValueError(
            f"{topic} has {partitions} partitions and the session {slots} task slots: "
            "real-time mode holds a slot for each partition, and one without would never "
            "be read (give it more slots: --master local[N], or more executor cores)"
        )
    if partitions == slots:
        log.warning(
            "%s holds all %d task slots: no other query of this session can run", topic, slots
        )


def realtime_rows(messages: Any, config: RealTimeConfig) -> Any:
    """The Kafka sink's rows (topic, key, value, headers) for the sender's messages and
    rejects (`sender.sender_stream` over `read_upstream`'s records, `refusal` among its
    reasons): each message to its send queue, in sequence, with the router's headers; each
    refused record to `rejects_topic` with its reason. One projection, no shuffle."""
    ok = F.col("reject_reason").isNull()
    # A refused record is one row (`validate` keeps it whole): its text, cut so that the
    # reject fits the record limit, its length in a header, its key cut too.
    record = F.col("record").cast("binary")
    routed = api.to_router_rows(
        messages,
        group_id=F.when(ok, F.col("guarantee_id")),
        sequence="seq",
        final="final",
        payload=F.when(ok, F.col("value")).otherwise(
            F.substring(record, 1, config.max_record_bytes - 2 * OVERHEAD_BYTES - REJECT_KEY_BYTES)
        ),
        key=F.when(ok, F.col("key")).otherwise(
            F.substring(F.col("key").cast("binary"), 1, REJECT_KEY_BYTES)
        ),
        queues=config.send_queues,
        delivery=None if config.delivery is None else F.lit(config.delivery),
        headers={
            SCHEMA_HEADER: F.when(ok, F.col("schema")),
            domain.CREATED_HEADER: F.when(ok, F.col("created_ms")),
            REJECT_HEADER: F.col("reject_reason"),
            RECORD_BYTES_HEADER: F.when(~ok, F.octet_length(record)),
        },
        in_order=True,
        keep=("reject_reason",),
    )
    return routed.select(
        F.when(F.col("reject_reason").isNull(), F.col("topic"))
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
