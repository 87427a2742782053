"""The docs name what the code has: every metric, dead-letter reason and router event (the
drift the operations issue found); the settings: test_configuration_docs.py. Pure: reads
files."""

from __future__ import annotations

import re
import typing

from router.metrics import prom
from router.metrics import registry as metrics
from tests.fixtures.paths import ROOT


def text(*names: str) -> str:
    return "\n".join((ROOT / n).read_text() for n in names)


def test_every_metric_is_documented_in_operations() -> None:
    docs = text("docs/how-to/monitoring.md")
    names = typing.get_args(metrics.MetricName)
    missing = [n for n in names if f"`{n}`" not in docs]
    assert not missing, f"metrics not in docs/how-to/monitoring.md: {missing}"


def test_docs_metrics_lists_every_prometheus_series_with_its_type_and_labels() -> None:
    docs = text("docs/reference/metrics.md")
    rows = re.findall(r"^\| `(router_[a-z0-9_]+)` \| (\w+) \| ([^|]+) \|", docs, re.M)
    documented = {(name, kind, labels.strip()) for name, kind, labels in rows}
    assert len(rows) == len(documented), "a series listed twice in docs/reference/metrics.md"
    code = {(s.name, s.kind, ", ".join(f"`{x}`" for x in s.labels)) for s in prom.series()}
    assert documented == code, (
        f"not in docs/reference/metrics.md: {sorted(code - documented)}; "
        f"not in the registry: {sorted(documented - code)}"
    )


def test_every_dead_letter_reason_is_documented_in_events() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "router").rglob("*.py"))
    codes = set(re.findall(r'(?:BadInput|\.bad)\(\s*"([a-z][a-z-]+)"', source))
    codes |= {f"bad-{n}" for n in re.findall(r'_int\("([a-z]+)"', source)}
    assert {"bad-ttl", "bad-seq", "group-spans-partitions", "room-late"} <= codes
    docs = text("docs/reference/events.md")
    missing = sorted(c for c in codes if f"`{c}`" not in docs)
    assert not missing, f"reason codes not in docs/reference/events.md: {missing}"


def test_every_router_event_schema_is_documented_in_events() -> None:
    docs = text("docs/reference/events.md")
    schemas = sorted(p.stem for p in (ROOT / "schemas" / "router").glob("*.avsc"))
    assert "GroupStagingAborted" in schemas
    missing = [s for s in schemas if f"router.events.{s}" not in docs]
    assert not missing, f"event schemas not in docs/reference/events.md: {missing}"
