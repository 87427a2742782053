"""The Sender's producer span (pure, on OpenTelemetry's SDK in memory): it continues the
caller's `traceparent` and goes out in the message's headers in its place; it ends with
Kafka's acknowledgement, an error status if Kafka refused the message."""

from __future__ import annotations

from opentelemetry.trace import SpanKind, StatusCode

from router.sender.traced import SendSpans
from router.tracing.context import TRACEPARENT, TRACESTATE, parent_of
from tests.fixtures.tracing import SPAN_ID, TRACE_ID, MemorySpans
from tests.fixtures.tracing import TRACEPARENT as TP


class Acked:
    def offset(self) -> int:
        return 41


def test_the_span_continues_the_callers_trace_and_replaces_its_context() -> None:
    memory = MemorySpans()
    spans = SendSpans(memory.spans)
    span, headers = spans.start([("app", b"1"), (TRACEPARENT, TP), (TRACESTATE, b"k=v")])
    sent = parent_of(headers)
    assert sent is not None and sent.sampled and sent.trace_id == TRACE_ID
    assert sent.span_id == span.get_span_context().span_id != SPAN_ID
    assert sent.tracestate == "k=v" and ("app", b"1") in headers
    SendSpans.placed(span, "shop.send.1", 2, "order-1", 0, False, 5)
    seen: list[object] = []
    spans.acknowledged(span, lambda err, msg: seen.append(err))(None, Acked())
    (done,) = memory.finished()
    assert seen == [None] and done.name == "send shop.send.1" and done.kind is SpanKind.PRODUCER
    assert done.parent is not None and done.parent.span_id == SPAN_ID
    attrs = dict(done.attributes or {})
    assert attrs["messaging.kafka.offset"] == 41 and attrs["router.guarantee_id"] == "order-1"


def test_without_a_context_it_starts_a_trace_and_a_refusal_is_an_error() -> None:
    memory = MemorySpans()
    spans = SendSpans(memory.spans)
    span, headers = spans.start([])
    assert parent_of(headers) is not None
    spans.acknowledged(span, None)("MSG_SIZE_TOO_LARGE", None)
    (done,) = memory.finished()
    assert done.parent is None and done.status.status_code is StatusCode.ERROR
