"""The Spark benchmark's upstream Kafka topic, for the real-time sender (`--senders
real-time`): Spark's rate source -> business records as JSON lines -> `<run>.upstream`,
which the real-time sender reads (`spark_jobs.realtime`).

The writer is a micro-batch query of its own; a message's creation time is its upstream
record's Kafka timestamp (when the writer's producer sent it), so the writer's batches do
not count in the latency: the figures start where a real upstream topic would. The rows it
generated are read from its checkpoint, as the micro-batch sender's are
(`bench_output.rate_rows`).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F

from router.backends.kafka.clients import admin_config
from router.config import RouterSettings
from spark_jobs import sender
from spark_jobs.streaming import StreamJob

PARTITIONS = 1  # one long-lived task of the real-time sender reads it


def topics(run_id: str) -> tuple[str, str]:
    """The run's upstream topic and the real-time sender's rejects topic."""
    return f"{run_id}.upstream", f"{run_id}.rejects"


def create(settings: RouterSettings, names: tuple[str, ...]) -> None:
    admin = AdminClient(admin_config(settings.kafka))
    new = [NewTopic(name, PARTITIONS, 1) for name in names]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(timeout=30)


def delete(settings: RouterSettings, names: tuple[str, ...]) -> None:
    admin = AdminClient(admin_config(settings.kafka))
    for future in admin.delete_topics(list(names), operation_timeout=30).values():
        future.result(timeout=30)


def start_writer(
    spark: Any,
    kafka: dict[str, str],
    topic: str,
    rows_per_second: int,
    run_id: str,
    max_lines: int,
    checkpoint: str,
    trigger_seconds: float,
    name: str,
) -> StreamJob:
    """Rate rows -> `sender.rate_records` (no documents) -> one JSON line per record."""
    rate = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rows_per_second)
        .option("numPartitions", 1)
        .load()
    )
    records = sender.rate_records(rate, run_id, max_lines, documents=False)
    lines = records.select(
        F.coalesce("order_id", "update_id").cast("binary").alias("key"),
        F.to_json(F.struct(*[c for c in records.columns if not c.startswith("_")]))
        .cast("binary")
        .alias("value"),
    )

    def write(df: Any, _batch_id: int) -> None:
        df.write.format("kafka").options(**kafka).option("topic", topic).option(
            "kafka.enable.idempotence", "true"
        ).option("kafka.acks", "all").save()

    return StreamJob(spark, name, lines, write, checkpoint, trigger_seconds).start()
