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
  `spark.speculation=false`; keep it off on a cluster too.
* `read_router_queues`: the receive queues (or any topic the router writes) as a
  streaming (or batch) DataFrame of raw payloads with their routing headers parsed.
  Every Kafka source option passes through unchanged, `kafka.*` or not (`groupIdPrefix`,
  `minPartitions`, `maxOffsetsPerTrigger`, `maxTriggerDelay`, ...); the defaults
  (`read_committed`, headers included, `earliest`, `failOnDataLoss`) can be overridden.
* `complete_groups`: the checks of `groups.step` (one queue per group, in sequence from 0,
  completed by the final flag, copies recognised) over Spark's state, in event time (a
  watermark on the messages' creation time); see `group_state`. A group sent with
  whole-group delivery (`to_router_rows(..., delivery=F.lit("complete"))`) that a
  micro-batch holds entirely is emitted at once, its payloads never in the state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from router import contract
from spark_jobs.group_state import OUTCOME_SCHEMA, STATE_SCHEMA, checker

ColumnLike = Any  # a Column or a column name (pyspark is untyped here)

# What the router needs from a reader of its queues; a caller's option wins.
SOURCE_DEFAULTS: Mapping[str, str] = {
    "startingOffsets": "earliest",
    "includeHeaders": "true",
    "kafka.isolation.level": "read_committed",
    "failOnDataLoss": "true",
}
_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")


def _col(c: ColumnLike) -> Column:
    return F.col(c) if isinstance(c, str) else c


def _lit_or_col(c: ColumnLike | int | None) -> Column:
    if c is None:
        return F.lit(None).cast("string")
    if isinstance(c, int):
        return F.lit(str(c))
    return _col(c)


# ---------------------------------------------------------------------- writing


def to_router_rows(
    df: Any,
    *,
    group_id: ColumnLike,
    sequence: ColumnLike,
    final: ColumnLike,
    payload: ColumnLike,
    key: ColumnLike | None = None,
    queues: Sequence[str] | None = None,
    message_type: ColumnLike | None = None,
    ttl_ms: ColumnLike | int | None = None,
    on_poison: ColumnLike | None = None,
    delivery: ColumnLike | None = None,
    headers: Mapping[str, ColumnLike] | None = None,
    partitions: int | None = None,
) -> Any:
    """Router-ready Kafka rows (`topic` if `queues` is given, `key`, `value`, `headers`),
    ordered for the Kafka sink: one partition per group, sorted by `sequence`.

    `group_id` null makes an ordinary message (no group headers, whatever `final` says).
    `key` defaults to the group ID; `queues` picks a send queue by a stable hash of the
    group ID (else of the key, else of the payload); without it, give the sink a `topic`
    option. `headers` adds headers of your own (a null value is left out).
    `delivery` (`stream` or `complete`, e.g. `F.lit("complete")`) sets the group's
    `guarantee-delivery` header, on every member; without it the router's configuration
    decides (`routing.delivery_by_type`, `routing.default_delivery`).
    `partitions` sets how many tasks write (default `spark.sql.shuffle.partitions`).
    """
    gid = _col(group_id).cast("string")
    seq = _col(sequence).cast("bigint")
    value = _col(payload).cast("binary")
    key_col = (gid if key is None else _col(key)).cast("binary")
    route = F.coalesce(gid, key_col.cast("string"), F.sha2(value, 256))

    def header(name: str, column: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), column.cast("binary").alias("value"))

    grouped = gid.isNotNull()
    entries = [
        header(contract.GUARANTEE_ID, gid),
        header(contract.SEQ, F.when(grouped, seq.cast("string"))),
        header(contract.FINAL, F.when(grouped & _col(final), F.lit("true"))),
        header(contract.MESSAGE_TYPE, _lit_or_col(message_type)),
        header(contract.TTL_MS, F.when(grouped, _lit_or_col(ttl_ms).cast("string"))),
        header(contract.ON_POISON, F.when(grouped, _lit_or_col(on_poison))),
        header(contract.DELIVERY, F.when(grouped, _lit_or_col(delivery))),
    ]
    for name, column in (headers or {}).items():
        if name in contract.ROUTING_HEADERS or name == contract.CONTROL:
            raise ValueError(f"header {name!r} is the router's: use the named argument")
        entries.append(header(name, _col(column)))
    all_headers = F.filter(F.array(*entries), lambda h: h["value"].isNotNull())

    columns = [
        route.alias("_route"),
        seq.alias("_seq"),
        key_col.alias("key"),
        value.alias("value"),
        all_headers.alias("headers"),
    ]
    if queues is not None:
        if not queues:
            raise ValueError("queues is empty")
        names = F.array(*[F.lit(q) for q in queues])
        pick = (F.pmod(F.xxhash64(route), F.lit(len(queues))) + 1).cast("int")
        columns.insert(2, F.element_at(names, pick).alias("topic"))
    rows = df.select(*columns)
    rows = rows.repartition(partitions, "_route") if partitions else rows.repartition("_route")
    return rows.sortWithinPartitions("_route", "_seq").drop("_route", "_seq")


# ---------------------------------------------------------------------- reading


def source_options(queues: Sequence[str], options: Mapping[str, Any]) -> dict[str, str]:
    """The Kafka source options: the defaults, then every caller option unchanged, then
    `subscribe` to `queues` (unless the caller subscribes otherwise)."""
    merged = {**SOURCE_DEFAULTS, **{k: str(v) for k, v in options.items()}}
    if merged["includeHeaders"].lower() != "true":
        raise ValueError("the routing headers are needed: includeHeaders cannot be turned off")
    chosen = [name for name in _SUBSCRIPTIONS if name in merged]
    if queues:
        if chosen:
            raise ValueError(f"queues given and {chosen[0]} too: choose one")
        merged["subscribe"] = ",".join(queues)
    elif not chosen:
        raise ValueError("no queues: give queues, subscribePattern or assign")
    return merged


def header_value(name: str) -> Column:
    """The value of header `name` (the first, if repeated) as a string, or null."""
    found = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    return F.get(found, 0)["value"].cast("string")


def with_routing(kafka: Any) -> Any:
    """Records of Spark's Kafka source (with headers) -> `queue`, `partition`, `offset`,
    `timestamp`, `key`, `value`, `headers` (all of them, raw), and the routing headers
    parsed: `guarantee_id`, `seq` (null if absent or not a number; `raw_seq` as sent),
    `final`, `message_type`, `delivery` (the `guarantee-delivery` header as sent)."""
    raw_seq = header_value(contract.SEQ)
    final = header_value(contract.FINAL).isin("true", "1", "True", "TRUE")
    return kafka.select(
        F.col("topic").alias("queue"),
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
        header_value(contract.GUARANTEE_ID).alias("guarantee_id"),
        raw_seq.alias("raw_seq"),
        raw_seq.try_cast("bigint").alias("seq"),
        F.coalesce(final, F.lit(False)).alias("final"),
        header_value(contract.MESSAGE_TYPE).alias("message_type"),
        header_value(contract.DELIVERY).alias("delivery"),
    )


def read_router_queues(
    spark: Any, queues: Sequence[str], *, streaming: bool = True, **options: Any
) -> Any:
    """The messages on `queues`, with their routing headers (see `with_routing`).
    Pass Kafka source options as keywords: `**{"kafka.bootstrap.servers": ...}`,
    `maxOffsetsPerTrigger=...`, `groupIdPrefix=...`; `streaming=False` reads a batch."""
    reader = spark.readStream if streaming else spark.read
    return with_routing(reader.format("kafka").options(**source_options(queues, options)).load())


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
) -> Any:
    """Messages (as `read_router_queues` gives them) -> outcomes (`group_state.OUTCOME_SCHEMA`):
    one `group` row per complete group (members in sequence: `members_seq`,
    `members_record_id`, `members_offset`, `members_created_ms`, `members_value`), one
    `record` row per ordinary message, and `duplicate` and `violation` rows (with `reason`).

    `record_id` identifies a message (default: the SHA-256 of its payload): the same ID
    again is a copy, another ID at a seq already taken a conflict. `problem` (a string
    column, null when fine) makes a message a violation at once, e.g. a payload your
    code could not decode.

    Time is event time: `created_at` (a non-null timestamp; default the Kafka record's)
    should be the message's creation time, the same in a re-sent copy, so take it from
    the payload when it has one. The watermark trails the newest creation time read by
    `lateness_ms`. A group with no new message for `group_timeout_ms` (of creation time)
    is incomplete once the watermark has passed that; finished groups and ordinary
    records are remembered for `dedupe_horizon_ms` to recognise copies. A message older
    than the watermark when it is read is dropped by Spark, and counted in the query's
    progress (`numRowsDroppedByWatermark`; `streaming.StreamJob.dropped_by_watermark`).

    `delivery` (default the `delivery` column of `read_router_queues`) is `complete` on a
    group's first message if it was sent with whole-group delivery: such a group, when one
    micro-batch holds all of it (the router writes it in one transaction, and without
    `maxOffsetsPerTrigger` a micro-batch ends between transactions), is emitted at once and
    its payloads never enter the state; split across micro-batches, it is reassembled in
    the state like any group, with the same outcome (`groups`, "Whole groups")."""
    gid = F.col("guarantee_id")
    rid = F.sha2(F.col("value"), 256) if record_id is None else _col(record_id)
    no_seq = F.when(
        gid.isNotNull() & F.col("seq").isNull(),
        F.concat(
            F.lit("missing or malformed guarantee-seq: "),
            F.coalesce(F.col("raw_seq"), F.lit("(none)")),
        ),
    )
    why = no_seq if problem is None else F.coalesce(_col(problem), no_seq)
    created = (F.col("timestamp") if created_at is None else _col(created_at)).cast("timestamp")
    state_input = messages.select(
        why.alias("problem"),
        gid,
        F.when(gid.isNull(), rid).alias("ordinary_id"),
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
        created.alias("event_time"),
    ).withWatermark("event_time", f"{lateness_ms} milliseconds")
    return state_input.groupBy("guarantee_id", "ordinary_id").applyInPandasWithState(
        checker(group_timeout_ms, dedupe_horizon_ms),
        OUTCOME_SCHEMA,
        STATE_SCHEMA,
        "append",
        "EventTimeTimeout",
    )
