"""The tracing settings (`router.tracing`): OpenTelemetry spans exported by OTLP over HTTP,
off by default. Part of `router.config`, which re-exports them."""

from __future__ import annotations

from pydantic import Field, field_validator

from router.config.servers import _Section
from router.errors import ConfigError

# Where an OTLP/HTTP collector takes traces (Jaeger, Tempo, the OpenTelemetry Collector).
TRACES_PATH = "/v1/traces"


class TracingSettings(_Section):
    # Spans of every hop (the Sender, both units, the Receiver), W3C trace context in the
    # `traceparent`/`tracestate` headers; needs the `tracing` extra
    # (`pip install 'kafka-order-router[tracing]'`). Off: no span, no OpenTelemetry import.
    enabled: bool = False
    # The collector's OTLP/HTTP base address (`/v1/traces` is appended unless given); empty:
    # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else
    # http://localhost:4318.
    otlp_endpoint: str = ""
    # The share of new traces the Sender starts that are recorded (sampled); units and
    # receivers follow the sampled flag of the `traceparent` they are given.
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    # The spans' service.name; empty: OTEL_SERVICE_NAME, else `router-<role>`
    # (router-sender, router-send-unit, router-receive-unit, router-receiver).
    service_name: str = ""

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_address(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ConfigError("tracing.otlp_endpoint must start with http:// or https://")
        return value

    def traces_url(self) -> str | None:
        """The OTLP/HTTP traces URL, or None: the exporter's own (OTEL_* variables)."""
        if not self.otlp_endpoint:
            return None
        base = self.otlp_endpoint.rstrip("/")
        return base if base.endswith(TRACES_PATH) else base + TRACES_PATH
