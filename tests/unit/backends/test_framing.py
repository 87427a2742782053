"""The Schema Registry wire format (pure: bytes and schemas, no registry): a magic byte 0,
a 4-byte big-endian schema ID, a schemaless Avro body; and what is not one."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.backends.registry import framing
from router.backends.registry.framing import BadFrame
from router.errors import InvalidRequest

ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}],
    }
)


def test_a_frame_is_magic_byte_id_big_endian_then_the_body() -> None:
    assert framing.frame(258, b"body") == b"\x00\x00\x00\x01\x02body"
    assert framing.unframe(b"\x00\x00\x00\x01\x02body") == (258, b"body")
    assert framing.schema_id_of(b"\x00\x00\x00\x01\x02") == 258


@given(st.integers(0, framing.MAX_SCHEMA_ID), st.binary(max_size=64))
def test_unframe_inverts_frame(schema_id: int, body: bytes) -> None:
    assert framing.unframe(framing.frame(schema_id, body)) == (schema_id, body)


def test_a_record_round_trips_and_is_what_any_confluent_client_would_write() -> None:
    schema = framing.parse(ORDER)
    data = framing.encode(schema, 7, {"id": "o-1", "qty": 3})
    # magic 0, ID 7, then Avro: string "o-1" (zigzag length 3 -> 0x06), int 3 (-> 0x06)
    assert data == b"\x00\x00\x00\x00\x07\x06o-1\x06"
    assert framing.decode(schema, data) == (7, {"id": "o-1", "qty": 3})


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"", "0 bytes"), (b"\x00\x00\x01", "3 bytes"), (b"\x01\x00\x00\x00\x07\x06o-1\x06", "0x01")],
)
def test_what_is_not_framed_is_refused_as_unframed(data: bytes, why: str) -> None:
    with pytest.raises(BadFrame) as caught:
        framing.unframe(data)
    assert caught.value.reason == "unframed"
    assert why in caught.value.detail
    assert framing.schema_id_of(data) is None


@pytest.mark.parametrize(
    ("body", "why"),
    [(b"\x06o-", "does not decode"), (b"\x06o-1\x06\x00", "1 bytes over"), (b"", "decode")],
)
def test_a_body_that_is_not_one_record_of_the_schema_is_undecodable(body: bytes, why: str) -> None:
    with pytest.raises(BadFrame) as caught:
        framing.decode_body(framing.parse(ORDER), body)
    assert caught.value.reason == "undecodable"
    assert why in caught.value.detail


def test_bad_frames_are_invalid_requests_and_pickle() -> None:
    bad = BadFrame("unframed", "why")
    assert isinstance(bad, InvalidRequest)
    back = pickle.loads(pickle.dumps(bad))
    assert (back.reason, back.detail, str(back)) == ("unframed", "why", "why")


def test_an_id_outside_the_registry_range_cannot_be_framed() -> None:
    with pytest.raises(ValueError, match="schema ID"):
        framing.frame(-1, b"")
    with pytest.raises(ValueError, match="schema ID"):
        framing.frame(2**31, b"")
