"""The router's header contract as DataFrame functions, for any Spark job and any schema.

    rows = to_router_rows(df, group_id="order_id", sequence="line_no", final="is_last",
                          payload=F.to_json(F.struct("*")), queues=("orders.send.0",))
    rows.write.format("kafka").option("kafka.bootstrap.servers", servers).save()

    messages = read_router_queues(spark, ["orders.recv.0"], **{"kafka.bootstrap.servers":
                                  servers}, maxOffsetsPerTrigger=10_000)
    outcomes = complete_groups(messages, record_id=..., created_at=...)

* `to_router_rows`: any DataFrame -> the columns of Spark's Kafka sink (`topic`, `key`,
  `value`, `headers`) with the routing headers of `router.contract`. **Group order is
  explicit**: the rows are repartitioned by group and sorted by sequence within each
  partition, so one task writes a whole group, in sequence, through one Kafka producer
  (which keeps the order on the group's partition; the sink's producer is idempotent).
  This holds only if a task is never run twice at once: `session.build_session` pins
  `spark.speculation=false`; keep it off on a cluster too. It also cuts large payloads
  into segments (`segment_bytes`, `router.contract.segments`' contract), and sets a lifetime
  (`router.contract.lifetime`) and multicast (`router.table.multicast`): see `writing`.
* `read_router_queues`: the receive queues (or any topic the router writes) as a
  streaming (or batch) DataFrame of raw payloads with their routing headers parsed.
  Every Kafka source option passes through unchanged, `kafka.*` or not (`groupIdPrefix`,
  `minPartitions`, `maxOffsetsPerTrigger`, `maxTriggerDelay`, ...); the defaults
  (`read_committed`, headers included, `earliest`, `failOnDataLoss`) can be overridden.
* `complete_groups`: the checks of `groups.step` (one queue per group, in sequence from 0,
  completed by the final flag, copies recognised) over Spark's state
  (`transformWithState`, row-based, on the RocksDB state store: a group's members in a
  list state, appended as they come, its metadata in a value state), in event time (a
  watermark on the messages' creation time, event-time timers); see `group_state`. A group sent with
  whole-group delivery (`to_router_rows(..., delivery=F.lit("complete"))`) that a
  micro-batch holds entirely is emitted at once, its payloads never in the state.
  Segments are reassembled and checked against their length and SHA-256 (`segmented`),
  messages whose lifetime ended before they were read are `expired` outcomes, and each
  multicast copy counts once on its own queue.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from router import contract
from spark_jobs.group_state import OUTCOME_SCHEMA, GroupProcessor
from spark_jobs.reading import (
    SOURCE_DEFAULTS,
    header_value,
    read_router_queues,
    source_options,
    with_routing,
)
from spark_jobs.writing import to_router_rows

__all__ = [
    "SOURCE_DEFAULTS",
    "complete_groups",
    "header_value",
    "read_router_queues",
    "source_options",
    "to_router_rows",
    "with_routing",
]

ColumnLike = Any  # a Column or a column name (pyspark is untyped here)
ON_EXPIRY = ("skip", "expire-group")


def _col(c: ColumnLike) -> Column:
    return F.col(c) if isinstance(c, str) else c


# ---------------------------------------------------------------------- checking


def complete_groups(
    messages: Any,
    *,
    record_id: ColumnLike | None = None,
    schema: ColumnLike | None = None,
    problem: ColumnLike | None = None,
    created_at: ColumnLike | None = None,
    delivery: ColumnLike = "delivery",
    group_timeout_ms: int = 300_000,
    dedupe_horizon_ms: int = 600_000,
    lateness_ms: int = 60_000,
    on_expiry: str = "skip",
) -> Any:
    """Messages (as `read_router_queues` gives them) -> outcomes (`group_state.OUTCOME_SCHEMA`):
    one `group` row per complete group (members in sequence: `members_seq`,
    `members_record_id`, `members_offset`, `members_created_ms`, `members_value`,
    `members_parts`), one `record` row per ordinary message, and `duplicate`, `violation`
    and `expired` rows (with `reason`).

    Segments (`router.contract.segments`): a segmented member is one member of its GROUP row,
    reassembled (`members_value` the whole payload, `members_record_id` its segment ID,
    `members_parts` its segments' offsets), its length and SHA-256 checked; a segmented
    ordinary message (a group of its own, guarantee ID = segment ID) is one `record`
    row with no guarantee ID (`parts`: its segments' offsets). One that does not add up
    (`segment-missing`, `checksum-mismatch`, ...; `segmented`) makes its group a
    violation, every record with the reason; malformed segment headers are `bad-segment`
    violations at once. `record_id`, `problem` and `created_at` are evaluated per Kafka
    record, so on a segment (a piece of a payload) they should not decode the payload:
    a segment's record ID is `<segment-id>#<index>` whatever `record_id` says.

    Lifetime (`router.contract.lifetime`): a message whose instant (`expires_ms`) is not after the
    micro-batch's time (`current_timestamp()`, the same when a batch is replayed) is an
    `expired` row, never delivered; in a group, per its `message-on-expiry` header
    (default `on_expiry`): `skip` goes on without it, `expire-group` expires the rest of
    the group (`groups`). Multicast (`router.table.multicast`): an ordinary message sent to
    several queues is one `record` per queue; only a second copy on the same queue is a
    copy (dropped and counted).

    `record_id` identifies a message (default: the SHA-256 of its payload): the same ID
    again is a copy, another ID at a seq already taken a conflict. `problem` (a string
    column, null when fine) makes a message a violation at once, e.g. a payload your
    code could not decode.

    Time is event time: `created_at` (a non-null timestamp; default the Kafka record's)
    should be the message's creation time, the same in a re-sent copy, so take it from
    the payload when it has one. The watermark trails the newest creation time read by
    `lateness_ms`. A group with no new message for `group_timeout_ms` (of creation time)
    is incomplete once the watermark has passed that; finished groups are remembered for
    `dedupe_horizon_ms` to recognise copies (a copy of a member is a `duplicate` row). An
    ordinary message's copies are dropped in the JVM (`dropDuplicatesWithinWatermark`:
    recognised until the watermark has passed the original's creation time plus
    `lateness_ms`, not `dedupe_horizon_ms`; the state needs Spark's RocksDB state store)
    and counted (`numDroppedDuplicateRows`; `streaming.StreamJob.duplicates_dropped`),
    never in Python state. A copy that shares the original's `created_at` and comes later
    than that is older than the watermark, so dropped as late and counted too; one that
    does not share it (the default `created_at`, the Kafka record's timestamp, is a re-sent
    copy's own) and comes more than about `lateness_ms` later is a second record: give
    `created_at` from the payload. A message older
    than the watermark when it is read is dropped by Spark, and counted in the query's
    progress (`numRowsDroppedByWatermark`; `streaming.StreamJob.dropped_by_watermark`).

    `delivery` (default the `delivery` column of `read_router_queues`) is `complete` on a
    group's first message if it was sent with whole-group delivery: such a group, when one
    micro-batch holds all of it (the router writes it in one transaction, and without
    `maxOffsetsPerTrigger` a micro-batch ends between transactions), is emitted at once and
    its payloads never enter the state; split across micro-batches, it is reassembled in
    the state like any group, with the same outcome (`groups`, "Whole groups")."""
    if on_expiry not in ON_EXPIRY:
        raise ValueError(f"on_expiry must be one of {ON_EXPIRY}, not {on_expiry!r}")
    gid = F.col("guarantee_id")
    segment = F.col("segment_id").isNotNull()
    rid = F.sha2(F.col("value"), 256) if record_id is None else _col(record_id)
    rid = F.when(
        segment, F.concat_ws("#", "segment_id", F.col("segment_index").cast("string"))
    ).otherwise(rid)
    no_seq = F.when(
        gid.isNotNull() & F.col("seq").isNull(),
        F.concat(
            F.lit(f"missing or malformed {contract.SEQ}: "),
            F.coalesce(F.col("raw_seq"), F.lit("(none)")),
        ),
    )
    headers_problem = F.coalesce("segment_problem", "lifetime_problem", no_seq)
    why = headers_problem if problem is None else F.coalesce(_col(problem), headers_problem)
    created = (F.col("timestamp") if created_at is None else _col(created_at)).cast("timestamp")
    now_ms = F.unix_millis(F.current_timestamp())
    expired = F.when(
        F.col("expires_ms") <= now_ms,
        F.format_string(
            "expired: lifetime ended %d ms before the receiver read it (expires at %d)",
            now_ms - F.col("expires_ms"),
            F.col("expires_ms"),
        ),
    )
    ordinary_id = F.when(F.col("multicast"), F.concat_ws("@", rid, "queue")).otherwise(rid)
    state_input = messages.select(
        why.alias("problem"),
        gid,
        F.when(gid.isNull(), ordinary_id).alias("ordinary_id"),
        rid.alias("record_id"),
        (F.lit(None) if schema is None else _col(schema)).cast("string").alias("schema"),
        "queue",
        "partition",
        "offset",
        F.coalesce(F.col("seq"), F.lit(0)).cast("bigint").alias("seq"),
        "final",
        F.coalesce(_col(delivery) == F.lit("complete"), F.lit(False)).alias("complete"),
        F.unix_millis(created).alias("created_ms"),
        "value",
        "segment_id",
        "segment_index",
        "segment_last",
        "segment_bytes",
        "segment_sha256",
        expired.alias("expired"),
        (F.coalesce("on_expiry", F.lit(on_expiry)) == F.lit("expire-group")).alias("expire_group"),
        "multicast",
        created.alias("event_time"),
    ).withWatermark("event_time", f"{lateness_ms} milliseconds")
    _need_rocksdb(messages.sparkSession)
    # Copies of ordinary messages are dropped here, in the JVM, by one deduplication over
    # every message: an ordinary one without a problem keys by its ID (its first copy
    # goes on), any other by its position (it always goes on). One chain, not a branch
    # per kind: each branch of a streaming query would read the source again.
    position = F.format_string("\u0000%s[%d]@%d", "queue", "partition", "offset")
    ordinary = gid.isNull() & F.col("problem").isNull()
    first = state_input.withColumn(
        "dedupe_key", F.when(ordinary, F.col("ordinary_id")).otherwise(position)
    ).dropDuplicatesWithinWatermark(["dedupe_key"])
    # Ordinary messages then go through the stateful step without state, a few buckets
    # of them per micro-batch (a Python call each, not one per message).
    bucket = F.when(gid.isNull(), F.pmod(F.hash("ordinary_id"), F.lit(ORDINARY_BUCKETS)))
    return (
        first.withColumn("bucket", bucket)
        .groupBy("guarantee_id", "bucket")
        .transformWithState(
            GroupProcessor(group_timeout_ms, dedupe_horizon_ms),
            OUTCOME_SCHEMA,
            "Append",
            "EventTime",
        )
    )


ORDINARY_BUCKETS = 16
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"


def _need_rocksdb(spark: Any) -> None:
    """`transformWithState` runs only on the RocksDB state store: say so before Spark
    fails the query at its first micro-batch with STORE_BACKEND_NOT_SUPPORTED_FOR_TWS."""
    provider = spark.conf.get(STATE_PROVIDER_CONF, None)
    if provider != ROCKSDB_PROVIDER:
        raise ValueError(
            f"complete_groups needs Spark's RocksDB state store (transformWithState): set "
            f"{STATE_PROVIDER_CONF}={ROCKSDB_PROVIDER} on the session (now {provider!r}); "
            "spark_jobs.session.build_session does"
        )
