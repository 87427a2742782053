"""The W3C trace context read from and written into Kafka headers (pure)."""

from __future__ import annotations

import pytest

from router.tracing.context import (
    TRACEPARENT,
    TRACESTATE,
    format_traceparent,
    parent_of,
    parse_traceparent,
    traced,
    with_context,
)

TP = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_traceparent_reads_back_as_written() -> None:
    ids = parse_traceparent(TP)
    assert ids == (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1)
    assert format_traceparent(*ids) == TP
    assert parse_traceparent(TP.decode()) == ids


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace ID
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span ID
        b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  # 00 with more
        b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  # no dash after
        b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ],
)
def test_what_is_not_a_traceparent_is_refused(raw: bytes) -> None:
    assert parse_traceparent(raw) is None


def test_a_later_version_with_more_fields_is_read() -> None:
    assert parse_traceparent(b"01" + TP[2:] + b"-what-comes") is not None


def test_parent_of_reads_the_state_and_the_sampled_flag() -> None:
    headers = [("guarantee-id", b"g"), (TRACEPARENT, TP), (TRACESTATE, b"vendor=1")]
    parent = parent_of(headers)
    assert parent is not None and parent.sampled and parent.tracestate == "vendor=1"
    assert traced(headers) == parent
    unsampled = [(TRACEPARENT, TP[:-2] + b"00")]
    assert parent_of(unsampled) is not None and traced(unsampled) is None


def test_no_traceparent_or_two_of_them_is_no_context() -> None:
    assert parent_of(None) is None and traced([]) is None
    assert traced([("guarantee-id", b"g")]) is None
    assert parent_of([(TRACEPARENT, TP), (TRACEPARENT, TP)]) is None
    assert parent_of([(TRACEPARENT, None)]) is None
    assert traced([(TRACEPARENT, b"garbage")]) is None


def test_with_context_replaces_the_callers_context_and_keeps_the_rest() -> None:
    headers = [("a", b"1"), (TRACEPARENT, b"old"), (TRACESTATE, b"old=1"), ("b", None)]
    out = with_context(headers, TP, "k=v")
    assert out == [("a", b"1"), ("b", None), (TRACEPARENT, TP), (TRACESTATE, b"k=v")]
    assert with_context([], TP, None) == [(TRACEPARENT, TP)]
