"""How a process gets its spans (`router.tracing.spans.Spans`): built from the tracing
settings, or around an application's own OpenTelemetry tracer. Nothing imports
OpenTelemetry until tracing is asked for: the router runs without the `tracing` extra
while tracing is off."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from router.config.tracing import TracingSettings
from router.errors import ConfigError

if TYPE_CHECKING:
    from router.tracing.spans import Spans

EXTRA = "pip install 'kafka-order-router[tracing]'"


def _module() -> Any:
    try:
        from router.tracing import spans  # noqa: PLC0415 (OpenTelemetry: only when asked for)
    except ImportError as exc:
        raise ConfigError(
            f"tracing needs OpenTelemetry ({exc.name or exc} is missing): {EXTRA}"
        ) from exc
    return spans


def spans_for(
    settings: TracingSettings,
    role: str,
    instance: str = "",
    resource: Mapping[str, str] | None = None,
) -> Spans | None:
    """The spans of a process of `role` (`sender`, `send-unit`, ...), with `resource`:
    attributes shared by all of them; None if tracing is off; ConfigError if it is on and
    OpenTelemetry is not installed."""
    if not settings.enabled:
        return None
    spans: Spans = _module().build(settings, role, instance, resource)
    return spans


def wrap(tracer: Any) -> Spans | None:
    """Spans on an application's own OpenTelemetry tracer (None: no tracing)."""
    if tracer is None:
        return None
    spans: Spans = _module().Spans(tracer)
    return spans
