"""The Spark sender's sources: business records (`domain.INPUT_SCHEMA`) as they arrive.

* `read_files`: a directory where JSON-lines files are dropped over time (move finished
  files in; names starting with `.` or `_` are ignored), parsed by `parse_lines`. A line
  that is not a valid record keeps its text (`_line`) and is marked (`_corrupt_record`),
  so that `records.validate` sends it to the rejects, verbatim, with the reason.
* `read_kafka`: the JSON values of an upstream Kafka topic (`realtime.read_upstream`),
  in micro-batches.
* `read_rate` / `rate_records`: synthetic records from Spark's rate source, for load.

Each gives a streaming DataFrame of records for `sender.start` (`read_kafka` also their
creation time and a reason to refuse, as `start` takes them); `rate_records` maps any
DataFrame with a `value` column.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from spark_jobs import domain, realtime


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
