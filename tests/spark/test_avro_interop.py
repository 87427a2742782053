"""Python (fastavro) and Spark (from_avro/to_avro) read each other's Avro records, and
write byte-identical ones, for every payload schema of the Spark demo domain; registry-framed
too."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from router.backends.registry import framing
from router.contract import schemas
from spark_jobs import domain
from spark_jobs.registry import (
    registry_body,
    registry_frame,
    registry_framed,
    registry_schema_id,
)

pytestmark = pytest.mark.spark

AT = dt.datetime(2025, 3, 14, 15, 9, 26, 535_000, tzinfo=dt.UTC)

SAMPLES: dict[str, list[dict[str, Any]]] = {
    domain.ORDER_LINE: [
        {
            "record_id": "PO-7/0",
            "order_id": "PO-7",
            "customer_id": "C-0042",
            "line_no": 0,
            "line_count": 2,
            "sku": "SKU-1234",
            "quantity": 3,
            "unit_price_cents": 1999,
            "currency": "EUR",
            "created_at": AT,
        },
        {
            "record_id": "PO-7/1",
            "order_id": "PO-7",
            "customer_id": "C-0042",
            "line_no": 1,
            "line_count": 2,
            "sku": "SKU-ÄÖÜ-é",
            "quantity": 2_000_000_000,
            "unit_price_cents": 2**40,
            "currency": "JPY",
            "created_at": AT,
        },
    ],
    domain.DOCUMENT_MESSAGE: [
        {
            "record_id": "D-1",
            "document_id": "D-1",
            "name": "contract.pdf",
            "created_at": AT,
            "content": bytes(range(256)) * 3,
        },
        {"record_id": "D-2", "document_id": "D-2", "name": "", "created_at": AT, "content": b""},
    ],
    domain.STOCK: [
        {
            "record_id": "SU-1",
            "sku": "SKU-1",
            "warehouse": "WH-3",
            "delta": -17,
            "created_at": AT,
        }
    ],
}

SPARK_TYPES = {
    domain.ORDER_LINE: "record_id STRING, order_id STRING, customer_id STRING, line_no INT, "
    "line_count INT, sku STRING, quantity INT, unit_price_cents BIGINT, currency STRING, "
    "created_at TIMESTAMP",
    domain.DOCUMENT_MESSAGE: "record_id STRING, document_id STRING, name STRING, "
    "created_at TIMESTAMP, content BINARY",
    domain.STOCK: "record_id STRING, sku STRING, warehouse STRING, delta INT, created_at TIMESTAMP",
}


def _normalise(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for key, value in out.items():
        if isinstance(value, bytearray):
            out[key] = bytes(value)
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            out[key] = value.replace(tzinfo=dt.UTC)
    return out


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_python_and_spark_write_identical_bytes_and_read_each_other(spark: Any, name: str) -> None:
    records = SAMPLES[name]
    avro = domain.avro_json(name)
    python_bytes = [schemas.encode(name, r) for r in records]

    # Spark writes: the same values, encoded by to_avro.
    columns = [f.split()[0] for f in SPARK_TYPES[name].split(", ")]
    df = spark.createDataFrame([tuple(r[c] for c in columns) for r in records], SPARK_TYPES[name])
    spark_bytes = [
        bytes(row.v) for row in df.select(to_avro(F.struct(*columns), avro).alias("v")).collect()
    ]
    assert spark_bytes == python_bytes

    # Python reads what Spark wrote.
    assert [_normalise(schemas.decode(name, b)) for b in spark_bytes] == records

    # Spark reads what Python wrote.
    read = spark.createDataFrame([(b,) for b in python_bytes], "v BINARY").select(
        from_avro("v", avro, {"mode": "FAILFAST"}).alias("r")
    )
    assert [_normalise(row.r.asDict()) for row in read.collect()] == records


def test_spark_frames_and_unframes_registry_payloads_as_the_python_side_does(spark: Any) -> None:
    """Spark's registry framing (spark_jobs.registry) around to_avro/from_avro writes the
    bytes `router.backends.registry.framing` writes (fastavro), and reads them back by ID."""
    name, schema_id = domain.STOCK, 70_000  # an ID above 0xFFFF: all four bytes count
    avro = domain.avro_json(name)
    records = SAMPLES[name]
    python_bytes = [framing.encode(framing.parse(avro), schema_id, r) for r in records]
    columns = [f.split()[0] for f in SPARK_TYPES[name].split(", ")]
    df = spark.createDataFrame([tuple(r[c] for c in columns) for r in records], SPARK_TYPES[name])
    framed = df.select(registry_frame(to_avro(F.struct(*columns), avro), schema_id).alias("v"))
    assert [bytes(row.v) for row in framed.collect()] == python_bytes

    mixed = spark.createDataFrame(
        [(b,) for b in python_bytes] + [(b"\x01not framed",), (b"\x00\x00",)], "v BINARY"
    )
    read = mixed.where(registry_framed("v")).select(
        registry_schema_id("v").alias("id"),
        from_avro(registry_body("v"), avro, {"mode": "FAILFAST"}).alias("r"),
    )
    rows = read.collect()
    assert [row.id for row in rows] == [schema_id] * len(records)
    assert [_normalise(row.r.asDict()) for row in rows] == records
