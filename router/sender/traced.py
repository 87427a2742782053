"""The Sender's spans (`router.tracing`): a producer span per `send()`, from the call until
Kafka acknowledged the message, whose context goes out in the message's `traceparent` and
`tracestate` headers. It continues the trace the caller's own `traceparent` header names, or
the caller's current OpenTelemetry span, or starts one (`tracing.sample_ratio`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from router.tracing.context import parent_of, with_context

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from router.tracing.spans import Spans

HeaderList = Sequence[tuple[str, str | bytes | None]]
OnDelivery = Callable[[Any, Any], None]


class SendSpans:
    def __init__(self, spans: Spans) -> None:
        self.spans = spans

    def start(self, headers: HeaderList) -> tuple[Span, HeaderList]:
        """A producer span for one send, and the headers that carry its context."""
        span = self.spans.start(
            "send",
            parent_of(headers),
            {"messaging.system": "kafka", "messaging.operation.type": "send"},
        )
        context = self.spans.propagated(span)
        return span, headers if context is None else with_context(headers, *context)

    @staticmethod
    def placed(span: Span, topic: str, partition: int, gid: str | None, seq: int | None,
               final: bool, size: int) -> None:  # fmt: skip
        """Where the message went: the span's name and attributes."""
        span.update_name(f"send {topic}")
        attrs: dict[str, Any] = {
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(partition),
            "messaging.message.body.size": size,
        }
        if gid is not None:
            attrs["router.guarantee_id"] = gid
            attrs["router.final"] = final
            if seq is not None:
                attrs["router.seq"] = seq
        span.set_attributes(attrs)

    def acknowledged(self, span: Span, on_delivery: OnDelivery | None) -> OnDelivery:
        """A delivery callback that ends the span (with Kafka's error, if it refused the
        message), then calls the caller's."""
        end = self.spans.end

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                end(span, None, {"messaging.kafka.offset": msg.offset()})
            else:
                end(span, str(err))
            if on_delivery is not None:
                on_delivery(err, msg)

        return delivered

    def failed(self, span: Span, exc: BaseException) -> None:
        """The send raised before anything was produced."""
        span.record_exception(exc)
        self.spans.end(span, f"{type(exc).__name__}: {exc}")
