"""Tracing off costs nothing and needs nothing: the router's modules import without
OpenTelemetry installed and load none of the span machinery while tracing is off; tracing
on without it is a ConfigError that names the extra to install. Each check runs in a fresh
interpreter."""

from __future__ import annotations

import subprocess
import sys

from tests.fixtures.paths import ROOT

MODULES = (
    "router.cli.main",
    "router.unit.loop",
    "router.sender",
    "router.receiver",
    "router.sweeper.loop",
    "router.console.server",
)


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_router_imports_and_runs_off_without_opentelemetry() -> None:
    code = f"""
import sys
sys.modules["opentelemetry"] = None  # as if not installed: any import of it fails
for name in {MODULES!r}:
    __import__(name)
from router.config import RouterSettings, TracingSettings
from router.errors import ConfigError
from router.tracing.setup import spans_for
from router.topology.side import side_spec
from router.unit.spans import UnitSpans
settings = RouterSettings()
assert spans_for(settings.tracing, "sender") is None
assert UnitSpans.of(settings, side_spec(settings, "send"), "send-unit", "x") is None
try:
    spans_for(TracingSettings(enabled=True), "sender")
except ConfigError as exc:
    print(exc)
else:
    raise SystemExit("tracing on without OpenTelemetry did not fail")
"""
    proc = run(code)
    assert proc.returncode == 0, proc.stderr
    assert "kafka-order-router[tracing]" in proc.stdout


def test_off_the_router_loads_no_span_machinery() -> None:
    """(redis-py itself imports OpenTelemetry's API when it is installed: not counted.)"""
    code = f"""
import sys
for name in {MODULES!r}:
    __import__(name)
loaded = sorted(
    m for m in sys.modules
    if m == "router.tracing.spans" or m.startswith("opentelemetry.exporter")
)
assert not loaded, loaded
"""
    proc = run(code)
    assert proc.returncode == 0, proc.stderr
