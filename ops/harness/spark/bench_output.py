"""What the Spark benchmark's receiver committed, read back from its Parquet output
through the file sink's log, and what the sender generated, recomputed from the rate
source's row values (`sender.rate_records` over `spark.range`).

Completeness is judged from record IDs: every message generated appears once among the
receiver's complete groups (`members`) and ordinary records, nothing else appears, and
every purchase order is one complete `groups` row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from ops.harness.spark.bench_stats import batch_of_files, read_sink_log
from spark_jobs import outputs, sender


@dataclass
class Output:
    """The receiver's output, per micro-batch."""

    groups: list[tuple[int, int]] = field(default_factory=list)  # (batch, last created ms)
    batch_of_group: dict[str, int] = field(default_factory=dict)  # guarantee ID -> batch
    messages_per_batch: dict[int, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)  # rows per `output`
    reasons: list[str] = field(default_factory=list)  # a few violations' reasons


@dataclass(frozen=True)
class Completeness:
    generated_rows: int
    expected_messages: int
    expected_groups: int
    received_messages: int  # distinct record IDs among groups' members and records
    missing: int
    unexpected: int
    repeated: int  # record IDs in more than one row of groups/records
    groups_complete: int  # `groups` rows of expected groups with every member

    @property
    def ok(self) -> bool:
        return (
            self.missing == 0
            and self.unexpected == 0
            and self.repeated == 0
            and self.received_messages == self.expected_messages
            and self.groups_complete == self.expected_groups
        )


def read(spark: Any, output: Path) -> Output:
    out = Output(rows=dict.fromkeys(outputs.OUTPUTS, 0))
    log = output / "_spark_metadata"
    if not log.is_dir():
        return out
    files = spark.createDataFrame(
        sorted(batch_of_files(read_sink_log(log)).items()), "file STRING, batch INT"
    )
    name = F.element_at(F.split(F.input_file_name(), "/"), -1)
    df = outputs.read(spark, str(output)).withColumn("file", name)
    df = df.join(F.broadcast(files), "file", "left").persist()
    try:
        out.rows.update(
            {r.output: r.n for r in df.groupBy("output").agg(F.count("*").alias("n")).collect()}
        )
        out.messages_per_batch = {
            r.batch: r.n
            for r in df.where(F.col("output").isin("groups", "records"))
            .groupBy("batch")
            .agg(F.sum("messages").alias("n"))
            .collect()
        }
        last = F.array_max(F.transform("members", lambda m: F.unix_millis(m["created_at"])))
        rows = (
            df.where(F.col("output") == "groups")
            .select("batch", "guarantee_id", last.alias("created"))
            .collect()
        )
        out.groups = [(r.batch, r.created) for r in rows]
        out.batch_of_group = {r.guarantee_id: r.batch for r in rows}
        out.reasons = [
            f"{r.guarantee_id or r.record_id}: {r.reason}"
            for r in df.where(F.col("output") == "violations").limit(5).collect()
        ]
    finally:
        df.unpersist()
    return out


def rate_rows(checkpoint: Path, rows_per_second: int) -> int:
    """The rows Spark's rate source generated for the micro-batches the sender committed:
    the rate source's offset is the second it has reached, and it makes `rows_per_second`
    rows a second (no ramp-up), numbered from 0. Read from the sender's checkpoint, not
    from its progress, whose `numInputRows` counts each read of the source."""
    commits = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    if not commits:
        return 0
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    return int(lines[-1]) * rows_per_second


def _expected(spark: Any, run_id: str, generated_rows: int, max_lines: int) -> Any:
    """The messages (record ID, guarantee ID) of rate rows 0..generated_rows-1, mapped as
    the sender maps them."""
    values = spark.range(generated_rows).withColumnRenamed("id", "value")
    records = sender.rate_records(values, run_id, max_lines, documents=False)
    return sender.to_messages(sender.validate(records)).select("record_id", "guarantee_id")


def expected_count(spark: Any, run_id: str, generated_rows: int, max_lines: int) -> int:
    """How many messages rate rows 0..generated_rows-1 make."""
    return int(_expected(spark, run_id, generated_rows, max_lines).count())


def completeness(
    spark: Any, output: Path, run_id: str, generated_rows: int, max_lines: int
) -> Completeness:
    """The messages the sender generated (rows 0..generated_rows-1 of the rate source,
    mapped as the sender mapped them) against what the receiver's output holds."""
    expected = _expected(spark, run_id, generated_rows, max_lines).persist()
    got = (
        outputs.read(spark, str(output))
        .where(F.col("output").isin("groups", "records"))
        .select(
            F.explode(
                F.coalesce(
                    F.transform("members", lambda m: m["record_id"]), F.array(F.col("record_id"))
                )
            ).alias("record_id")
        )
        .persist()
    )
    try:
        distinct = got.distinct()
        groups_complete = (
            outputs.read(spark, str(output), "groups")
            .join(
                expected.groupBy("guarantee_id").agg(F.count("*").alias("n")),
                "guarantee_id",
            )
            .where(F.col("messages") == F.col("n"))
            .count()
        )
        return Completeness(
            generated_rows=generated_rows,
            expected_messages=expected.count(),
            expected_groups=expected.where(F.col("guarantee_id").isNotNull())
            .select("guarantee_id")
            .distinct()
            .count(),
            received_messages=distinct.count(),
            missing=expected.join(got, "record_id", "left_anti").count(),
            unexpected=distinct.join(expected, "record_id", "left_anti").count(),
            repeated=got.groupBy("record_id").count().where("count > 1").count(),
            groups_complete=groups_complete,
        )
    finally:
        got.unpersist()
        expected.unpersist()
