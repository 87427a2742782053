"""The Grafana dashboard (ops/grafana/router-dashboard.json) is built on the series the code
exports only: every metric a panel's query names is one that `router.metrics.prom` serves,
resolved the way the exporter names it (a counter `router_<name>_total`, a histogram's
`_bucket`, `_sum` and `_count`, a gauge as it is), from the typed registry
(`router.metrics.registry`), never from a list kept here. A panel naming a metric that no
longer exists fails the test. (Its queries also run against a real Prometheus in
tests/integration/metrics/test_prometheus.py.)"""

from __future__ import annotations

import json
import re
from typing import Any, get_args

from router.metrics import prom
from router.metrics.registry import MetricName
from tests.fixtures.dashboard import load, panels, targets

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
KEYWORDS |= {"and", "or", "unless", "inf", "nan"}

# What a series of each kind is stored as (Prometheus's text format, prometheus_client).
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> dict[str, prom.Series]:
    """Every name PromQL can use for the router's series -> the series the exporter serves
    (counters are registered by their name with `_total`, `prom.series`)."""
    out: dict[str, prom.Series] = {}
    for s in prom.series():
        base = s.name.removesuffix("_total") if s.kind == "counter" else s.name
        for suffix in SUFFIXES[s.kind]:
            out[base + suffix] = s
    return out


def variable_queries(board: dict[str, Any]) -> list[str]:
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


def problems(board: dict[str, Any]) -> list[str]:
    """Each query of `board` that names a metric the code does not export, or none."""
    known = exported()
    out = []
    for title, expr in targets(board):
        names = metric_names(expr)
        if not names:
            out.append(f"{title!r}: no metric in {expr!r}")
        for name in sorted(names - set(known)):
            out.append(f"{title!r}: {name} is not exported ({expr!r})")
    for q in variable_queries(board):
        for name in re.findall(r"label_values\((\w+)", q):
            if name not in known:
                out.append(f"variable {q!r}: {name} is not exported")
    return out


def test_the_parser_finds_metric_names() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (role, le) "
        '(rate(router_hop_latency_seconds_bucket{topology=~"$topology"}[$__rate_interval]))) '
        "/ on (role) group_left max(up)"
    )
    assert metric_names(expr) == {"router_hop_latency_seconds_bucket", "up"}


def test_names_resolve_as_the_exporter_names_them() -> None:
    known = exported()
    assert known["router_messages_in_total"].kind == "counter"
    assert known["router_hop_latency_seconds_bucket"].name == "router_hop_latency_seconds"
    assert known["router_open_groups"].kind == "gauge"
    for wrong in (
        "router_messages_in",  # a counter without _total
        "router_messages_in_total_bucket",  # a counter is no histogram
        "router_hop_latency_seconds",  # a histogram is only its _bucket, _sum and _count
        "router_open_groups_total",  # a gauge is no counter
    ):
        assert wrong not in known, wrong


def test_every_dashboard_query_names_only_exported_metrics() -> None:
    board = load()
    assert len(targets(board)) >= 20
    assert problems(board) == []


def test_a_panel_naming_a_metric_that_does_not_exist_fails() -> None:
    board = load()
    board["panels"].append(
        {
            "type": "row",
            "title": "gone",
            "panels": [
                {
                    "title": "room size",
                    "targets": [{"expr": 'max(router_room_size{topology=~"$topology"})'}],
                },
                {
                    "title": "lag",
                    "targets": [{"expr": "sum(rate(router_source_lag_total[1m]))"}],
                },
            ],
        }
    )
    board["templating"]["list"][1]["query"] = "label_values(router_gone_total, topology)"
    found = problems(json.loads(json.dumps(board)))
    assert len(found) == 3, found
    assert any("router_room_size is not exported" in p for p in found), found
    assert any("router_source_lag_total is not exported" in p for p in found), found
    assert any("router_gone_total is not exported" in p for p in found), found


def test_the_dashboard_shows_the_figures_an_operator_asks_for() -> None:
    used = {name for _, expr in targets(load()) for name in metric_names(expr)}
    waits = {f"router_{n}_total" for n in get_args(MetricName) if n.startswith("room_wait_")}
    assert waits and waits <= used, sorted(waits - used)  # the wait-time distribution
    for name in (
        "router_messages_in_total",  # throughput per role
        "router_messages_out_total",
        "router_hop_latency_seconds_bucket",
        "router_txn_commit_seconds_bucket",
        "router_redis_rtt_seconds_bucket",
        "router_open_groups",  # open groups per destination
        "router_source_lag",  # consumer lag, per partition and per side
        "router_dead_letters_total",
        "router_expired_total",  # expiries
        "router_room_parked_total",  # the waiting room
        "router_room_admitted_total",
    ):
        assert name in used, name
    titles = [p.get("title", "") for p in panels(load())]
    assert len(titles) == len(set(titles)), titles
