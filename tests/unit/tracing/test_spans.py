"""The router's spans on OpenTelemetry's SDK, recorded in memory: parented to the message's
context, the context they propagate, and what `build` makes of the settings."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from router.config import TracingSettings
from router.tracing import spans as otel
from router.tracing.context import Parent, parse_traceparent
from router.tracing.setup import spans_for, wrap
from tests.fixtures.tracing import SPAN_ID, TRACE_ID, MemorySpans

PARENT = Parent(TRACE_ID, SPAN_ID, 1, "vendor=abc")


def test_a_finished_span_is_a_child_of_the_messages_context() -> None:
    memory = MemorySpans()
    memory.spans.finished("route q", PARENT, 1_000, 5_000, {"router.outcome": "forwarded"})
    (span,) = memory.finished()
    assert span.context.trace_id == TRACE_ID
    assert span.parent is not None and span.parent.span_id == SPAN_ID and span.parent.is_remote
    assert (span.start_time, span.end_time) == (1_000, 5_000)
    assert span.kind is SpanKind.CONSUMER
    assert span.attributes == {"router.outcome": "forwarded"}
    assert span.context.trace_state.get("vendor") == "abc"


def test_a_started_span_propagates_its_own_context_in_the_same_trace() -> None:
    memory = MemorySpans()
    span = memory.spans.start("send", PARENT, {})
    propagated = memory.spans.propagated(span)
    assert propagated is not None
    ids = parse_traceparent(propagated[0])
    assert ids is not None
    assert ids[0] == TRACE_ID and ids[1] == span.get_span_context().span_id != SPAN_ID
    assert propagated[1] == "vendor=abc"
    memory.spans.end(span, "refused", {"k": 1})
    (done,) = memory.finished()
    assert done.status.status_code is StatusCode.ERROR and done.attributes == {"k": 1}


def test_without_a_parent_a_span_starts_a_trace() -> None:
    memory = MemorySpans()
    span = memory.spans.start("send", None, {})
    memory.spans.end(span)
    (done,) = memory.finished()
    assert done.parent is None and done.kind is SpanKind.PRODUCER


def test_the_current_span_records_an_exception() -> None:
    memory = MemorySpans()
    with pytest.raises(ValueError), memory.spans.current("process q", PARENT, {}):
        raise ValueError("bad")
    (done,) = memory.finished()
    assert done.status.status_code is StatusCode.ERROR
    assert done.parent is not None and done.parent.span_id == SPAN_ID


def test_an_unreadable_tracestate_is_dropped() -> None:
    memory = MemorySpans()
    memory.spans.finished("x", Parent(TRACE_ID, SPAN_ID, 1, "not a state!!"), 1, 2, {})
    (span,) = memory.finished()
    assert span.context.trace_id == TRACE_ID


def test_off_is_none_and_on_builds_an_exporter_named_after_the_role(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert spans_for(TracingSettings(), "send-unit") is None
    assert wrap(None) is None
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    settings = TracingSettings(enabled=True, otlp_endpoint="http://127.0.0.1:1", sample_ratio=0.5)
    spans = spans_for(settings, "send-unit", "host-1")
    assert isinstance(spans, otel.Spans) and spans.provider is not None
    resource = spans.provider.resource.attributes
    assert resource["service.name"] == "router-send-unit"
    assert resource["service.instance.id"] == "host-1"
    assert "0.5" in spans.provider.sampler.get_description()
    spans.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "shop")
    spans = spans_for(settings, "sender")
    assert spans is not None and spans.provider is not None
    assert spans.provider.resource.attributes["service.name"] == "shop"
    spans.shutdown()


def test_the_settings_say_where_traces_go() -> None:
    assert TracingSettings().traces_url() is None
    url = TracingSettings(otlp_endpoint="http://j:4318/").traces_url()
    assert url == "http://j:4318/v1/traces"
    assert (
        TracingSettings(otlp_endpoint="https://j/v1/traces").traces_url() == "https://j/v1/traces"
    )
    with pytest.raises(ValueError, match="http://"):
        TracingSettings(otlp_endpoint="j:4318")
