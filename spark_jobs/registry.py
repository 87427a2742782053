"""Schema Registry framing as DataFrame functions: Confluent's wire format (a magic byte 0,
the writer schema's registry ID as 4 bytes big-endian, then the Avro body) around Spark's
`to_avro` / `from_avro`, which know no registry. The IDs come from the registry in the
driver (`router.backends.registry.client.RegistryClient`: `register`, `latest`, `schema`):

    schema_id, schema = client.latest("orders-value")
    rows = df.select(registry_frame(to_avro(F.struct("*"), schema), schema_id).alias("value"))

    framed = messages.where(registry_framed("value"))
    orders = framed.where(registry_schema_id("value") == schema_id).select(
        from_avro(registry_body("value"), client.schema(schema_id)).alias("order"))

A record is decoded with the schema its ID names: select each ID's rows with
`registry_schema_id` and read them with that ID's schema (`client.schema(id)`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

MAGIC = b"\x00"
HEADER_BYTES = 5

ColumnLike = Any  # a Column or a column name (pyspark is untyped here)


def _col(c: ColumnLike) -> Column:
    return F.col(c) if isinstance(c, str) else c


def registry_frame(body: ColumnLike, schema_id: int) -> Column:
    """The Avro `body` (binary, e.g. `to_avro(...)`) framed with `schema_id`."""
    if not 0 <= schema_id <= 2**31 - 1:
        raise ValueError(f"a registry schema ID is 0..2**31-1, not {schema_id}")
    return F.concat(F.lit(bytearray(MAGIC + schema_id.to_bytes(4, "big"))), _col(body))


def registry_framed(value: ColumnLike) -> Column:
    """True where `value` is a framed payload: at least 5 bytes, the first one 0."""
    v = _col(value)
    return (F.length(v) >= HEADER_BYTES) & (F.substring(v, 1, 1) == F.lit(bytearray(MAGIC)))


def registry_schema_id(value: ColumnLike) -> Column:
    """The schema ID of a framed payload (an int; meaningless where not `registry_framed`)."""
    return F.conv(F.hex(F.substring(_col(value), 2, 4)), 16, 10).cast("int")


def registry_body(value: ColumnLike) -> Column:
    """The Avro body of a framed payload, for `from_avro` with the schema its ID names."""
    return F.substring(_col(value), HEADER_BYTES + 1, 2**31 - 1)
