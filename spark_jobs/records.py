"""The Spark sender's transformations: business records -> messages -> Kafka rows (pure
DataFrame -> DataFrame functions, no I/O).

    validate -> to_messages -> to_kafka_rows (api.to_router_rows)
           \\-> rejects (`messages_and_rejects`: both in one projection)

* Groups: a purchase order's lines form a group; the guarantee ID comes from the business
  key, `guarantee-seq` is the position, and `guarantee-final` is true on the last message
  (see `domain`). A document is one ordinary message; one larger than `segment_bytes`
  goes as segments of the router's contract (`router.contract.segments`, a group of its own).
* Kafka: the send queue is a stable hash of the key (the guarantee ID, or the record ID
  of an ordinary message) over the send queues, and the key keeps a group on one
  partition, so the send units see it in order. `to_kafka_rows` goes through
  `api.to_router_rows`: repartitioned by group and sorted by sequence, so one task
  writes a whole group in order (with `spark.speculation` off, see `session`).
  Payloads are Avro (`to_avro` with the schemas in `schemas/demo/`), routing metadata is
  in headers (`router.contract`), plus a `schema` header naming the payload's Avro schema.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.avro.functions import to_avro

from router.contract.schemas import SCHEMA_HEADER
from spark_jobs import api, domain


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


def messages_and_rejects(
    records: Any, max_guarantee_id_bytes: int = 256, created: Any = None, extra_reason: Any = None
) -> Any:
    """Messages (`to_messages`' columns) and rejects (`record`, `reject_reason`) in one
    projection, told apart by `reject_reason`, from one read of the source (the body of
    `sender.sender_stream`). `created` (a timestamp column of `records`) dates the
    messages; by default the micro-batch's time. `extra_reason`: see `validate`."""
    checked = validate(records, max_guarantee_id_bytes, extra_reason)
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
