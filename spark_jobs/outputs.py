"""The receiver's output: one Parquet dataset written by Spark's file sink, exactly once.

Every outcome of `api.complete_groups` becomes one row of one wide schema, partitioned
by `output` (`<path>/output=groups/`, `records`, `duplicates`, `violations`). The file
sink records each micro-batch's files in `<path>/_spark_metadata/` when the batch
commits; a batch that is repeated after a crash writes new files and commits them under
the same batch ID once. Any Spark reader of `<path>` (batch or streaming) reads through
that log, so it sees every committed batch whole and nothing of an attempt that never
committed. (A tool that lists the directory itself, ignoring the log, may see leftovers
of such attempts.)

* `groups`: each complete group once: `guarantee_id`, `kind` (`purchase_order`),
  `queue`, `partition`, `first_offset`, `offset` (its last), `messages`, `members` (seq,
  record ID, offset, creation time), and the business object: the purchase order with
  its lines and total;
* `records`: each ordinary record once: a stock update (`sku`, `warehouse`, `delta`) or
  a document (`document`: its bytes, size, SHA-256 and how many `segments` it came in,
  reassembled from the router's segments and checked against their `segment-bytes`
  and `segment-sha256`; `parts`: the segments' offsets); each multicast copy once per
  queue (`multicast`);
* `duplicates`: copies of messages already received, with the `reason`;
* `expired`: messages whose lifetime had ended when the receiver read them, with the
  `reason` and the raw `value`: never delivered;
* `violations`: every message that breaks a guarantee or cannot be read, with the
  `reason` and the raw `value`; every segment of a document whose segments do not add
  up (`segment-missing`, `checksum-mismatch`, ...) is one, with the reason.

`messages` is the number of messages a row accounts for (1, or a group's members).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from spark_jobs import domain, groups

OUTPUTS = ("groups", "records", "duplicates", "violations", "expired")


def _purchase_order(lines: Any) -> Any:
    first_line = F.get(lines, 0)
    return F.struct(
        first_line["order_id"].alias("order_id"),
        first_line["customer_id"].alias("customer_id"),
        first_line["currency"].alias("currency"),
        F.transform(
            lines,
            lambda x: F.struct(
                x["line_no"].alias("line_no"),
                x["sku"].alias("sku"),
                x["quantity"].alias("quantity"),
                x["unit_price_cents"].alias("unit_price_cents"),
            ),
        ).alias("lines"),
        F.aggregate(
            lines,
            F.lit(0).cast("bigint"),
            lambda acc, x: acc + x["quantity"] * x["unit_price_cents"],
        ).alias("total_cents"),
    )


def output_rows(outcomes: Any) -> Any:
    """Outcomes (`group_state.OUTCOME_SCHEMA` + `received_at`) -> rows of the output, one
    per outcome, each with its `output` partition. A projection: no shuffle, and the
    stateful step before it runs once."""
    output = F.col("output")
    is_group = output == groups.GROUP
    is_record = output == groups.RECORD
    permissive = {"mode": "PERMISSIVE"}
    named_document = is_record & (F.col("schema") == domain.DOCUMENT_MESSAGE)
    doc = from_avro(
        F.when(named_document, F.col("value")),
        domain.avro_json(domain.DOCUMENT_MESSAGE),
        permissive,
    )
    is_order = is_group & (F.col("schema") == domain.ORDER_LINE)
    # A reassembled message was not decoded before: one that is not a valid document is a
    # violation, not a record.
    unreadable = (
        is_record
        & F.col("parts").isNotNull()
        & F.coalesce(F.col("schema") != domain.DOCUMENT_MESSAGE, F.lit(True))
    )
    unreadable = unreadable | (named_document & doc["record_id"].isNull())
    is_record = is_record & ~unreadable
    is_document = is_record & (F.col("schema") == domain.DOCUMENT_MESSAGE)
    # A purchase order's lines, decoded once into a column of their own: the struct below
    # reads them three times, and a higher-order function is interpreted, each use again.
    outcomes = outcomes.withColumn(
        "_lines",
        F.when(
            is_order,
            F.transform(
                "members_value", lambda v: from_avro(v, domain.avro_json(domain.ORDER_LINE))
            ),
        ),
    )
    lines = F.col("_lines")
    document = F.struct(
        doc["document_id"].alias("document_id"),
        doc["name"].alias("name"),
        F.octet_length(doc["content"]).alias("size"),
        F.sha2(doc["content"], 256).alias("sha256"),
        doc["content"].alias("content"),
        F.coalesce(F.size("parts"), F.lit(1)).alias("segments"),
    )
    members = F.transform(
        F.arrays_zip("members_seq", "members_record_id", "members_offset", "members_created_ms"),
        lambda m: F.struct(
            m["members_seq"].alias("seq"),
            m["members_record_id"].alias("record_id"),
            m["members_offset"].alias("offset"),
            F.timestamp_millis(m["members_created_ms"]).alias("created_at"),
        ),
    )
    update = from_avro(F.col("value"), domain.avro_json(domain.STOCK))
    where = (
        F.when(is_group, F.lit("groups"))
        .when(is_record, F.lit("records"))
        .when(output == groups.DUPLICATE, F.lit("duplicates"))
        .when(output == groups.EXPIRED, F.lit("expired"))
        .otherwise(F.lit("violations"))
    )
    single = ~is_group
    stock = is_record & (F.col("schema") == domain.STOCK)
    return outcomes.select(
        where.alias("output"),
        "guarantee_id",
        F.when(is_document, doc["record_id"]).when(single, F.col("record_id")).alias("record_id"),
        F.when(is_order, F.lit(domain.PURCHASE_ORDER))
        .when(is_document, F.lit(domain.DOCUMENT))
        .when(stock, F.lit(domain.STOCK_UPDATE))
        .alias("kind"),
        "queue",
        "partition",
        F.when(is_group, F.get("members_offset", 0)).alias("first_offset"),
        "offset",
        F.when(single, F.col("seq")).alias("seq"),
        F.when(single, F.col("final")).alias("final"),
        F.when(is_group, F.size("members_seq")).otherwise(F.lit(1)).alias("messages"),
        F.when(is_group, members).alias("members"),
        F.when(is_order, _purchase_order(lines)).alias("purchase_order"),
        F.when(is_document, document).alias("document"),
        F.timestamp_millis("created_ms").alias("created_at"),
        "received_at",
        F.when(stock, update["sku"]).alias("sku"),
        F.when(stock, update["warehouse"]).alias("warehouse"),
        F.when(stock, update["delta"]).alias("delta"),
        F.when(
            unreadable,
            F.concat(
                F.lit("undecodable: the reassembled message is not a valid "),
                F.coalesce(F.col("schema"), F.lit("(no schema header)")),
            ),
        )
        .otherwise(F.col("reason"))
        .alias("reason"),
        F.when(output.isin(groups.VIOLATION, groups.EXPIRED) | unreadable, F.col("value")).alias(
            "value"
        ),
        "multicast",
        F.when(single, F.col("parts")).alias("parts"),
    )


def counts(rows: Any) -> tuple[str, list[Any]]:
    """What `observe` counts per micro-batch (in the query's progress, no extra job):
    messages accounted for, and rows per output."""
    metrics = [F.coalesce(F.sum("messages"), F.lit(0)).alias("messages")]
    for name in OUTPUTS:
        metrics.append(F.count(F.when(F.col("output") == name, 1)).alias(name))
    return "receiver", metrics


def read(spark: Any, path: str, output: str | None = None) -> Any:
    """The output as a batch DataFrame, through the sink's log (`output`: one of OUTPUTS)."""
    df = spark.read.parquet(path)
    return df if output is None else df.where(F.col("output") == output)
