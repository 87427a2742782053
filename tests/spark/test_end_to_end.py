"""Spark sender -> send units -> receive units -> Spark receiver, on the real stack: every
group complete, in order, from one queue; nothing lost, duplicated or violated."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from ops.harness.spark.demo_flow import SparkDemoSpec, run_spark_demo
from ops.harness.spark.demo_records import expected, read_output
from ops.harness.stack.pipeline import PipelineSpec
from router.config import load_settings
from spark_jobs import outputs, workload
from tests.fixtures.helpers import unique

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_spark_jobs_through_the_router_keep_every_group_whole_and_in_order(
    spark: Any, kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    base = load_settings(
        kafka={"bootstrap_servers": kafka_bootstrap},
        redis={"url": redis_url, "key_prefix": redis_prefix},
    )
    business = workload.BusinessWorkload(
        unique("spark-e2e"), orders=220, documents=30, updates=300, max_document_bytes=120_000
    )
    spec = SparkDemoSpec(business, files=4, file_interval_s=0.5, segment_bytes=4096, timeout_s=300)
    pipeline = PipelineSpec(send_units=2, receive_units=2, transfer_partitions=4, receive_queues=6)
    log = io.StringIO()
    run_dir = tmp_path / business.run_id

    result = run_spark_demo(spark, base, spec, pipeline, run_dir, out=log)

    r = result.report
    assert result.ok, log.getvalue()
    assert r.groups_sent == business.orders
    assert r.groups_complete == r.groups_sent
    assert r.ordinary_sent == business.updates + business.documents
    assert r.received == r.sent
    assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
    # The receiver's Parquet output holds every group and record once, with its business
    # object; documents came in segments of the router's contract (up to 30 of 4 KiB),
    # reassembled and checked against their length and SHA-256.
    out = read_output(spark, run_dir / "output")
    assert out.rows == {
        "groups": r.groups_sent,
        "records": business.updates + business.documents,
        "duplicates": 0,
        "violations": 0,
        "expired": 0,
    }
    documents = outputs.read(spark, str(run_dir / "output"), "records").where("kind = 'document'")
    assert documents.count() == business.documents
    assert documents.where("document.segments > 1").count() > 0
    assert documents.agg(F.max("document.segments")).first()[0] >= 20
    sent = {s.event_id for s in expected(run_dir / "input", spec.segment_bytes)}
    assert {d.record_id for d in documents.collect()} <= sent
