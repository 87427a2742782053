"""The router's spans on an OpenTelemetry tracer: a finished span per message a unit
handled, the Sender's producer span whose context goes out in the message's headers, the
Receiver's. Imports OpenTelemetry (the `tracing` extra): loaded by `router.tracing.setup`
only when tracing is on."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from router.config.tracing import TracingSettings
from router.tracing.context import Parent, format_traceparent

Attributes = Mapping[str, Any]
PRODUCER, CONSUMER = SpanKind.PRODUCER, SpanKind.CONSUMER


def _context(parent: Parent) -> Any:
    """An OpenTelemetry context whose current span is the message's (remote) parent."""
    state = None
    if parent.tracestate:
        try:
            state = TraceState.from_header([parent.tracestate])
        except ValueError:
            state = None  # an unreadable tracestate is dropped, as the W3C spec says
    span = NonRecordingSpan(
        SpanContext(parent.trace_id, parent.span_id, True, TraceFlags(parent.flags), state)
    )
    return trace.set_span_in_context(span)


class Spans:
    """The router's spans on one tracer; `provider`: the one it built and shuts down."""

    def __init__(self, tracer: trace.Tracer, provider: TracerProvider | None = None) -> None:
        self.tracer = tracer
        self.provider = provider

    def finished(
        self,
        name: str,
        parent: Parent,
        start_ns: int,
        end_ns: int,
        attributes: Attributes,
        kind: SpanKind = CONSUMER,
    ) -> None:
        """A span of `parent`'s trace that began and ended at these instants (ns)."""
        span = self.tracer.start_span(name, _context(parent), kind, attributes, start_time=start_ns)
        span.end(end_time=max(end_ns, start_ns))

    def start(
        self, name: str, parent: Parent | None, attributes: Attributes, kind: SpanKind = PRODUCER
    ) -> Span:
        """A span, child of `parent` (None: of the current context, or a new trace)."""
        context = _context(parent) if parent is not None else None
        return self.tracer.start_span(name, context, kind, attributes)

    @staticmethod
    def propagated(span: Span) -> tuple[bytes, str | None] | None:
        """The `traceparent` (and `tracestate`) that makes the next hops `span`'s children;
        None if the tracer gave no valid span (tracing off in the caller's provider)."""
        sc = span.get_span_context()
        if not sc.is_valid:
            return None
        state = sc.trace_state.to_header() if sc.trace_state else ""
        return format_traceparent(sc.trace_id, sc.span_id, sc.trace_flags), state or None

    @staticmethod
    def end(span: Span, error: str | None = None, attributes: Attributes | None = None) -> None:
        if attributes:
            span.set_attributes(attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    @contextmanager
    def current(self, name: str, parent: Parent | None, attributes: Attributes) -> Iterator[Span]:
        """A span made current while the block runs (an exception is recorded on it)."""
        context = _context(parent) if parent is not None else None
        with self.tracer.start_as_current_span(name, context, CONSUMER, attributes) as span:
            yield span

    def shutdown(self) -> None:
        """Export what is left and stop the exporter (only a provider built here)."""
        if self.provider is not None:
            self.provider.shutdown()


def build(
    settings: TracingSettings,
    role: str,
    instance: str = "",
    resource: Mapping[str, str] | None = None,
) -> Spans:
    """Spans exported by OTLP/HTTP in batches, from a background thread. The exporter,
    the batching and the resource follow the standard OTEL_* variables where the settings
    leave them open (the endpoint, OTEL_EXPORTER_OTLP_HEADERS, OTEL_BSP_*,
    OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME)."""
    attributes: dict[str, Any] = {**(resource or {}), "router.role": role}
    if settings.service_name or not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = settings.service_name or f"router-{role}"
    if instance:
        attributes["service.instance.id"] = instance
    provider = TracerProvider(
        resource=Resource.create(attributes),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(settings.traces_url())))
    return Spans(provider.get_tracer("router"), provider)
