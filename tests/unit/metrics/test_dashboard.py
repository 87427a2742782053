"""The Grafana dashboard (ops/grafana/router-dashboard.json) is built on the registry's
series only: every query names metrics that `router.metrics.prom` exposes. (Its queries also run
against a real Prometheus in tests/integration/metrics/test_prometheus.py.)"""

from __future__ import annotations

import json
import re
from typing import Any

from router.metrics import prom
from tests.fixtures.dashboard import DASHBOARD, expressions

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
KEYWORDS |= {"and", "or", "unless", "inf", "nan"}


def variable_queries() -> list[str]:
    board: dict[str, Any] = json.loads(DASHBOARD.read_text())
    out = []
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            out.append(q["query"] if isinstance(q, dict) else q)
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression uses (not functions, labels or keywords)."""
    e = re.sub(r'"[^"]*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    tokens = re.findall(r"(?<![\w$.])([a-zA-Z_:][\w:]*)\s*(\(?)", e)
    return {name for name, call in tokens if not call and name not in KEYWORDS}


def test_the_parser_finds_metric_names() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (role, le) "
        '(rate(router_hop_latency_seconds_bucket{topology=~"$topology"}[$__rate_interval]))) '
        "/ on (role) group_left max(up)"
    )
    assert metric_names(expr) == {"router_hop_latency_seconds_bucket", "up"}


def test_every_dashboard_query_uses_only_registry_series() -> None:
    known = prom.stored_names()
    exprs = expressions()
    assert len(exprs) >= 20
    used: set[str] = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= known, f"{expr!r} uses {sorted(names - known)}: not in the registry"
        used |= names
    for q in variable_queries():
        (metric,) = re.findall(r"label_values\((\w+)", q)
        assert metric in known, q
    # The panels: throughput, hop latency, commit time, Redis round trips, open
    # groups, lag, dead letters.
    for name in (
        "router_messages_in_total",
        "router_hop_latency_seconds_bucket",
        "router_txn_commit_seconds_bucket",
        "router_redis_rtt_seconds_bucket",
        "router_open_groups",
        "router_source_lag",
        "router_dead_letters_total",
    ):
        assert name in used, name
