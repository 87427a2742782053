"""The Schema Registry wire format (Confluent's, which every registry-aware Kafka client
reads and writes): a magic byte 0, the writer schema's registry ID as 4 bytes big-endian,
then the Avro body, schemaless (fastavro). Pure: bytes and parsed schemas in, bytes and
records out; the HTTP client beside it is `client`.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro

from router.errors import InvalidRequest

MAGIC = 0
HEADER_BYTES = 5
MAX_SCHEMA_ID = 2**31 - 1  # the ID is a signed 32-bit integer in the registry's API
_HEADER = struct.Struct(">bI")


class BadFrame(InvalidRequest):
    """Bytes that are not a registry-framed payload (too short, or no magic byte 0), or an
    Avro body that does not decode with the schema its ID names (`reason` says which:
    "unframed" or "undecodable")."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.detail))


def frame(schema_id: int, body: bytes) -> bytes:
    """The framed payload: magic byte, `schema_id`, `body`."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"a registry schema ID is 0..{MAX_SCHEMA_ID}, not {schema_id}")
    return _HEADER.pack(MAGIC, schema_id) + body


def unframe(data: bytes) -> tuple[int, bytes]:
    """(schema ID, Avro body) of a framed payload; BadFrame("unframed") if it is not one."""
    if len(data) < HEADER_BYTES:
        raise BadFrame(
            "unframed",
            f"{len(data)} bytes: a registry-framed payload has at least {HEADER_BYTES} "
            "(magic byte 0 and a 4-byte schema ID)",
        )
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BadFrame(
            "unframed", f"first byte {data[0]:#04x}: a registry-framed payload starts with 0x00"
        )
    return schema_id, data[HEADER_BYTES:]


def schema_id_of(data: bytes | None) -> int | None:
    """The schema ID of a framed payload, None if `data` is not one (no exception)."""
    if data is None or len(data) < HEADER_BYTES or data[0] != MAGIC:
        return None
    return int(_HEADER.unpack_from(data)[1])


def parse(schema_json: str) -> Any:
    """A registry's schema text (Avro JSON) -> a schema fastavro reads and writes with."""
    return fastavro.parse_schema(json.loads(schema_json), _write_hint=False)


def encode(schema: Any, schema_id: int, record: Any) -> bytes:
    """`record` written with `schema` (parsed) and framed with `schema_id`."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, record)
    return frame(schema_id, buffer.getvalue())


def decode_body(schema: Any, body: bytes) -> Any:
    """The one record `body` holds, written with `schema` (parsed); BadFrame("undecodable")
    if it does not decode or leaves bytes over."""
    buffer = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(buffer, schema, None)
    except Exception as exc:
        raise BadFrame("undecodable", f"the Avro body does not decode: {exc}") from None
    if buffer.tell() != len(body):
        raise BadFrame(
            "undecodable",
            f"the Avro body leaves {len(body) - buffer.tell()} bytes over after one record",
        )
    return record


def decode(schema: Any, data: bytes) -> tuple[int, Any]:
    """(schema ID, record) of a framed payload whose writer schema is `schema` (parsed)."""
    schema_id, body = unframe(data)
    return schema_id, decode_body(schema, body)
