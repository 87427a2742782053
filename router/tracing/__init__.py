"""Distributed tracing (OpenTelemetry), off by default: the W3C trace context a message
carries in its `traceparent`/`tracestate` headers, read and written without OpenTelemetry
(`context`, pure), and the spans of every hop on an OpenTelemetry tracer (`spans`, which
imports OpenTelemetry and is loaded only when tracing is on: `setup`). The settings:
`router.config.tracing`; the spans each hop makes: docs/how-to/tracing.md."""
