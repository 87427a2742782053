"""Writing to the router from Spark: any DataFrame -> router-ready Kafka rows.

`to_router_rows` (re-exported by `spark_jobs.api`) puts the router's header contract on
each row: the routing headers (`router.contract`), segments of a large payload
(`router.contract.segments`), a lifetime (`router.contract.lifetime`) and multicast
(`router.table.multicast`). The header names come from those modules, never copied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from router import contract
from router.contract import lifetime, multicast, priority, segments
from router.contract.priority import PRIORITY

ColumnLike = Any  # a Column or a column name (pyspark is untyped here)
# The Java producer's default max.request.size, and the router's kafka.max_message_bytes.
RECORD_LIMIT = 1_048_576
_NAMED = (
    contract.ROUTING_HEADERS
    | segments.HEADERS
    | lifetime.HEADERS
    | multicast.HEADERS
    | {contract.CONTROL, PRIORITY, priority.BAND}
)


def _col(c: ColumnLike) -> Column:
    return F.col(c) if isinstance(c, str) else c


def _lit_or_col(c: ColumnLike | int | None) -> Column:
    """A column (or a column's name), a whole number as a literal, or null."""
    if c is None:
        return F.lit(None).cast("string")
    if isinstance(c, int):
        return F.lit(str(c))
    return _col(c)


HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def _header(name: str, column: Column) -> Column:
    """Header `name` as an array: one entry, or none where `column` is null. The headers
    are these arrays concatenated: no `filter` with a lambda, which Spark interprets
    row by row instead of compiling (it was most of the sender's CPU; issue 16)."""
    entry = F.struct(F.lit(name).alias("key"), column.cast("binary").alias("value"))
    return F.when(column.isNotNull(), F.array(entry)).otherwise(F.array().cast(HEADERS_TYPE))


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
    segment_bytes: int | None = None,
    segment_id: ColumnLike | None = None,
    expires_at: ColumnLike | None = None,
    lifetime_ms: ColumnLike | int | None = None,
    on_expiry: ColumnLike | None = None,
    multicast_to: ColumnLike | Sequence[str] | bool | None = None,
    priority: ColumnLike | int | None = None,
    in_order: bool = False,
    keep: Sequence[str] = (),
) -> Any:
    """Router-ready Kafka rows (`topic` if `queues` is given, `key`, `value`, `headers`),
    ordered for the Kafka sink: one partition per group, sorted by sequence.

    `in_order=True` says `df` already holds each group in one partition, in sequence (a
    Kafka source keyed by group, or one record exploded into its group's messages): the
    rows keep their partitions and order, with no shuffle and no sort, which is what
    Spark's real-time mode needs (`spark_jobs.realtime`). It cannot be combined with
    `segment_bytes` or `partitions`. `keep` names columns of `df` carried through as they
    are (on every segment of a row), for a caller that looks at them before the sink.

    `group_id` null makes an ordinary message (no group headers, whatever `final` says).
    `key` defaults to the group ID; `queues` picks a send queue by a stable hash of the
    group ID (else of the key, else of the payload); without it, give the sink a `topic`
    option. `headers` adds headers of your own (a null value is left out).
    `delivery` (`stream` or `complete`, e.g. `F.lit("complete")`) sets the group's
    `guarantee-delivery` header, on every member; without it the router's configuration
    decides (`routing.delivery_by_type`, `routing.default_delivery`).
    `partitions` sets how many tasks write (default `spark.sql.shuffle.partitions`).

    **Segments** (`segment_bytes`, at least 1024 and 16 KiB under 1 MiB): a payload
    larger than that becomes segments of that size (docs/explanation/segments.md). A
    group's member takes one `guarantee-seq` per segment: a member's number is its
    `sequence` plus the extra numbers the group's earlier segmented members of this
    DataFrame took (so number a group continued in a later DataFrame accordingly); the
    final flag goes on its last segment. An ordinary message becomes a group of its own
    whose guarantee ID is its segment ID, final on its last segment. `segment_id`
    defaults to a hash of the group, sequence and payload, so a replayed micro-batch
    sends the very same segments (a receiver recognises the copies). Needs a batch
    DataFrame (in a streaming job: inside `foreachBatch`).

    **Lifetime**: `expires_at` (a timestamp, or ms since the epoch) and/or `lifetime_ms`
    (from the record's timestamp), `on_expiry` (`skip` or `expire-group`), on every row
    (and segment) they are not null for. **Multicast**: `multicast_to=True` (or a boolean
    column) for every receive queue, a list of receive queues (or a string column of
    comma-separated names) for those; on ordinary messages only (the router dead-letters
    a grouped one as `multicast-in-group`). **Priority** (`router.contract.priority`): `priority`
    (0-9, 9 the highest) sets `message-priority`; a group keeps its first member's band,
    so give its members the same priority."""
    gid = _col(group_id).cast("string")
    seq = _col(sequence).cast("bigint")
    value = _col(payload).cast("binary")
    user_key = None if key is None else _col(key).cast("binary")
    segmenting = segment_bytes is not None
    if in_order and (segmenting or partitions is not None):
        raise ValueError("in_order keeps the input's partitions: no segment_bytes, no partitions")
    if segment_bytes is not None:
        segments.check_size(segment_bytes, RECORD_LIMIT)
        if df.isStreaming:
            raise ValueError("segment_bytes needs a batch DataFrame: call it in foreachBatch")

    extra = [
        _header(contract.MESSAGE_TYPE, _lit_or_col(message_type)),
        _expires_header(df, expires_at),
        _header(lifetime.LIFETIME_MS, _lit_or_col(lifetime_ms).cast("string")),
        _header(lifetime.ON_EXPIRY, _lit_or_col(on_expiry)),
        *_multicast_headers(df, multicast_to),
        _header(PRIORITY, _priority(priority)),
    ]
    for name, column in (headers or {}).items():
        if name in _NAMED:
            raise ValueError(f"header {name!r} is the router's: use the named argument")
        value_of = _col(column)
        if _type_of(df, value_of) != "binary":  # a number, a date...: as text
            value_of = value_of.cast("string")
        extra.append(_header(name, value_of))

    size = F.octet_length(value)
    cut = size > F.lit(segment_bytes or 0) if segmenting else F.lit(False)
    default_id = F.concat(
        F.lit("seg-"),
        F.substring(
            F.sha2(
                F.concat_ws(
                    "|", F.coalesce(gid, F.lit("")), seq.cast("string"), F.sha2(value, 256)
                ),
                256,
            ),
            1,
            32,
        ),
    )
    rows = df.select(
        gid.alias("_gid"),
        seq.alias("_seq"),
        F.coalesce(_col(final).cast("boolean"), F.lit(False)).alias("_final"),
        value.alias("_value"),
        (user_key if user_key is not None else F.lit(None).cast("binary")).alias("_key"),
        _lit_or_col(ttl_ms).cast("string").alias("_ttl"),
        _lit_or_col(on_poison).cast("string").alias("_poison"),
        _lit_or_col(delivery).cast("string").alias("_delivery"),
        F.concat(*extra).alias("_extra"),
        cut.alias("_cut"),
        F.when(cut, F.ceil(size / F.lit(segment_bytes or 1)))
        .otherwise(1)
        .cast("bigint")
        .alias("_n"),
        F.when(cut, default_id if segment_id is None else _col(segment_id).cast("string")).alias(
            "_set"
        ),
        F.when(cut, size).alias("_total"),
        F.when(cut, F.sha2(value, 256)).alias("_sha"),
        *keep,
    )
    if segmenting:
        route = F.coalesce("_gid", F.col("_key").cast("string"), F.sha2("_value", 256))
        earlier = (
            Window.partitionBy(route).orderBy("_seq").rowsBetween(Window.unboundedPreceding, -1)
        )
        rows = rows.withColumn("_shift", F.coalesce(F.sum(F.col("_n") - 1).over(earlier), F.lit(0)))
        rows = rows.select(
            "*",
            F.posexplode(F.sequence(F.lit(0).cast("bigint"), F.col("_n") - 1)).alias("_i", "_x"),
        )
    else:
        rows = rows.select("*", F.lit(0).alias("_shift"), F.lit(0).alias("_i"))
    return _finish_rows(rows, segment_bytes or 0, key is None, queues, partitions, in_order, keep)


def _priority(p: ColumnLike | int | None) -> Column:
    if p is None:
        return F.lit(None).cast("string")
    if isinstance(p, int):
        return F.lit(priority.header(p)[1].decode())  # ValueError outside 0..9
    return _col(p).cast("string")


def _type_of(df: Any, c: ColumnLike) -> str:
    """The Spark type name of column `c` of `df` (`boolean`, `string`, `timestamp`...)."""
    return str(df.select(_col(c)).schema.fields[0].dataType.typeName())


def _expires_header(df: Any, at: ColumnLike | None) -> Column:
    """`message-expires-at` from a timestamp column or a number of ms since the epoch."""
    if at is None:
        return _header(lifetime.EXPIRES_AT, F.lit(None))
    column = _col(at)
    if _type_of(df, column) in ("timestamp", "timestamp_ntz"):
        column = F.unix_millis(column)
    return _header(lifetime.EXPIRES_AT, column.cast("bigint").cast("string"))


def _multicast_headers(df: Any, to: ColumnLike | Sequence[str] | bool | None) -> list[Column]:
    """`message-delivery: multicast`, and `multicast-queues` when queues are named."""
    if to is None or to is False:
        return []
    on = F.lit(multicast.MULTICAST)
    if to is True:
        return [_header(multicast.DELIVERY, on)]
    if isinstance(to, (list, tuple)):
        names = dict(multicast.headers(list(to)))[multicast.QUEUES]  # Sender's checks
        return [_header(multicast.DELIVERY, on), _header(multicast.QUEUES, F.lit(names))]
    column = _col(to)
    if _type_of(df, column) == "boolean":
        return [_header(multicast.DELIVERY, F.when(column, on))]
    named = F.when(F.length(column) > 0, column.cast("string"))
    return [
        _header(multicast.DELIVERY, F.when(named.isNotNull(), on)),
        _header(multicast.QUEUES, named),
    ]


def _finish_rows(
    rows: Any,
    segment_bytes: int,
    key_default: bool,
    queues: Sequence[str] | None,
    partitions: int | None,
    in_order: bool = False,
    keep: Sequence[str] = (),
) -> Any:
    """Exploded rows -> the Kafka sink's columns, each segment with its headers, ordered
    (by a shuffle on the group and a sort, unless the rows are `in_order` already)."""
    cut, i, n = F.col("_cut"), F.col("_i"), F.col("_n")
    last = i == n - 1
    own = cut & F.col("_gid").isNull()  # an ordinary message, as a group of its own
    gid = F.when(own, F.col("_set")).otherwise(F.col("_gid"))
    grouped = gid.isNotNull()
    seq = F.when(own, i.cast("bigint")).otherwise(F.col("_seq") + F.col("_shift") + i)
    final = grouped & F.when(own, last).otherwise(F.col("_final") & last)
    chunk = F.when(
        cut, F.substring("_value", (i * segment_bytes + 1).cast("int"), segment_bytes)
    ).otherwise(F.col("_value"))
    key = gid.cast("binary") if key_default else F.col("_key")
    value_route = F.sha2("_value", 256)
    route = F.coalesce(gid, F.col("_key").cast("string"), value_route)
    entries = [
        _header(contract.GUARANTEE_ID, gid),
        _header(contract.SEQ, F.when(grouped, seq.cast("string"))),
        _header(contract.FINAL, F.when(final, F.lit("true"))),
        _header(contract.TTL_MS, F.when(grouped, F.col("_ttl"))),
        _header(contract.ON_POISON, F.when(grouped, F.col("_poison"))),
        _header(contract.DELIVERY, F.when(grouped, F.col("_delivery"))),
        _header(contract.SEGMENT_ID, F.when(cut, F.col("_set"))),
        _header(contract.SEGMENT_INDEX, F.when(cut, i.cast("string"))),
        _header(contract.SEGMENT_LAST, F.when(cut & last, F.lit("true"))),
        _header(contract.SEGMENT_BYTES, F.when(cut & last, F.col("_total").cast("string"))),
        _header(contract.SEGMENT_SHA256, F.when(cut & last, F.col("_sha"))),
    ]
    headers = F.concat(*entries, F.col("_extra"))
    columns = [
        route.alias("_route"),
        seq.alias("_order"),
        i.alias("_part"),
        key.alias("key"),
        chunk.alias("value"),
        headers.alias("headers"),
        *keep,
    ]
    if queues is not None:
        if not queues:
            raise ValueError("queues is empty")
        names = F.array(*[F.lit(q) for q in queues])
        pick = (F.pmod(F.xxhash64(route), F.lit(len(queues))) + 1).cast("int")
        columns.insert(3, F.element_at(names, pick).alias("topic"))
    out = rows.select(*columns)
    if in_order:
        return out.drop("_route", "_order", "_part")
    out = out.repartition(partitions, "_route") if partitions else out.repartition("_route")
    return out.sortWithinPartitions("_route", "_order", "_part").drop("_route", "_order", "_part")
