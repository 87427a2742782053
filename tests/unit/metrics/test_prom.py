"""Prometheus metrics and health of one process (`router.metrics.prom`, `router.metrics.exporter`):
the series come from the typed registry, counters are read from `Metrics`, timings reach the
histograms only when served, and /healthz and /readyz follow the loop and the servers."""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from ops.harness.stack.fleet import free_port
from router.config import RouterSettings
from router.metrics import prom
from router.metrics.exporter import Exporter
from router.metrics.registry import GaugeName, HistogramName, MetricName, Metrics, MetricsPublisher
from router.table.gauges import room_levels
from tests.fixtures.helpers import http_get as get


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_every_registry_name_is_one_series() -> None:
    names = [s.name for s in prom.series()]
    assert len(names) == len(set(names))
    assert len(names) == sum(
        len(typing.get_args(t)) for t in (MetricName, HistogramName, GaugeName)
    )
    assert "router_messages_in_total" in names and "router_hop_latency_seconds" in names
    assert "router_hop_latency_seconds_bucket" in prom.stored_names()


def test_counters_and_gauges_are_read_when_scraped() -> None:
    m = Metrics()
    gauges = prom.Gauges(live={"inflight_batches": lambda: 1.0})
    registry = CollectorRegistry()
    registry.register(prom.RouterCollector(m, gauges, "orders", "send-unit"))
    text = scrape(registry)
    for name in typing.get_args(MetricName):  # every counter, 0 before its first count
        assert f'router_{name}_total{{role="send-unit",topology="orders"}} 0.0' in text
    m.inc("messages_in", 3)
    gauges.values["open_groups"] = {("send", "1", "orders.transfer/0"): 2.0}
    text = scrape(registry)
    assert 'router_messages_in_total{role="send-unit",topology="orders"} 3.0' in text
    assert 'router_inflight_batches{role="send-unit",topology="orders"} 1.0' in text
    assert (
        'router_open_groups{cell="1",destination="orders.transfer/0",role="send-unit",'
        'side="send",topology="orders"} 2.0'
    ) in text


def test_timings_reach_the_histograms_only_when_served() -> None:
    m = Metrics()
    m.observe("redis_rtt_seconds", 0.001)  # no sink: dropped
    registry = CollectorRegistry()
    m.sink = prom.Histograms(registry, "orders", "receive-unit")
    m.observe("redis_rtt_seconds", 0.0003)
    text = scrape(registry)
    labels = 'role="receive-unit",topology="orders"'
    assert f"router_redis_rtt_seconds_count{{{labels}}} 1.0" in text
    assert f'router_redis_rtt_seconds_bucket{{le="0.0005",{labels}}} 1.0' in text
    assert f"router_txn_commit_seconds_count{{{labels}}} 0.0" in text


class Clock:
    """A monotonic clock on a machine that booted half a second ago."""

    def __init__(self) -> None:
        self.t = 0.5

    def __call__(self) -> float:
        return self.t


def test_liveness_counts_from_the_start_on_a_fresh_machine_then_from_the_last_beat() -> None:
    clock = Clock()
    beat: list[float | None] = [None]
    health = prom.Health(lambda: beat[0], liveness_s=30, window_s=10, now=clock)
    assert health.liveness(clock())[0]  # not "long ago": its start is the reference
    clock.t += 31
    assert not health.liveness(clock())[0]
    beat[0] = clock.t - 1
    ok, body = health.liveness(clock())
    assert ok and body["loop_s"] == pytest.approx(1)


def test_readiness_needs_partitions_no_back_off_and_servers_that_answer() -> None:
    clock = Clock()
    assigned = [0]
    waiting: list[str | None] = [None]
    health = prom.Health(
        lambda: clock.t, 30, 10, lambda: assigned[0], lambda: waiting[0], now=clock
    )
    ok, body = health.readiness(clock())
    assert not ok and body["reasons"] == ["no partitions assigned"]
    assigned[0] = 3
    assert health.readiness(clock()) == (True, {"ready": True, "reasons": []})
    waiting[0] = "backing off"
    assert health.readiness(clock())[1]["reasons"] == ["backing off"]
    waiting[0] = None
    # Redis: the publication of this interval failed; the next one went through.
    health.tick({"redis_round_trips": 5}, published=False, now=clock())
    assert "Redis" in health.readiness(clock())[1]["reasons"][0]
    health.tick({"redis_round_trips": 5}, published=True, now=clock())
    assert health.readiness(clock())[0]
    # Kafka: errors and no commit in an interval; a commit later clears it...
    health.tick({"kafka_errors": 1}, published=True, now=clock())
    assert "Kafka" in health.readiness(clock())[1]["reasons"][0]
    health.tick({"kafka_errors": 1, "txn_commits": 1}, published=True, now=clock())
    assert health.readiness(clock())[0]
    # ... and so does a quiet window (an idle unit whose consumer stopped complaining).
    clock.t += 1
    health.tick({"kafka_errors": 2, "txn_commits": 1}, published=True, now=clock())
    assert not health.readiness(clock())[0]
    clock.t += 10.5
    assert health.readiness(clock())[0]


def call(app: Callable[..., Any], path: str) -> tuple[str, bytes]:
    seen: list[str] = []
    body = b"".join(
        app(
            {"PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": ""},
            lambda s, h: seen.append(s),
        )
    )
    return seen[0], body


def test_the_wsgi_app_serves_metrics_and_both_checks() -> None:
    clock = Clock()
    registry = CollectorRegistry()
    registry.register(prom.RouterCollector(Metrics(), prom.Gauges(), "t", "sweeper"))
    health = prom.Health(lambda: None, 30, 10, assigned=lambda: 0, now=clock)
    app = prom.app(registry, health, now=clock)
    status, body = call(app, "/metrics")
    assert status == "200 OK" and b"router_swept_total" in body
    assert call(app, "/healthz")[0] == "200 OK"
    status, body = call(app, "/readyz")
    assert status.startswith("503") and json.loads(body)["reasons"] == ["no partitions assigned"]
    assert call(app, "/nothing")[0].startswith("404")


def test_the_exporter_serves_on_its_port_and_is_inert_on_port_0() -> None:
    m = Metrics()
    client = redis.Redis(host="127.0.0.1", port=1)  # never contacted here
    publisher = MetricsPublisher(m, client, "k", 1000)
    off = Exporter(RouterSettings(), "send-unit", m, publisher)
    off.start()
    off.stop()
    assert m.sink is None and not publisher.hooks
    port = free_port()
    settings = RouterSettings(metrics={"port": port})  # type: ignore[arg-type]
    exporter = Exporter(settings, "sweeper", m, publisher)
    exporter.start()
    try:
        m.inc("swept", 2)
        status, body = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert b'router_swept_total{role="sweeper",topology="router"} 2.0' in body
        assert b"process_cpu_seconds_total" in body
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        assert get(f"http://127.0.0.1:{port}/readyz") == (200, b'{"ready": true, "reasons": []}')
    finally:
        exporter.stop()


def test_the_rooms_gauges_are_its_size_and_its_oldest_wait_in_seconds() -> None:
    assert room_levels(0, None, 5_000) == (0.0, 0.0)  # nobody waits: 0, not unknown
    assert room_levels(3, 1_500, 5_000) == (3.0, 3.5)
    assert room_levels(1, 5_200, 5_000) == (1.0, 0.0)  # clocks a hair apart: never negative
    assert "room_waiting" in typing.get_args(GaugeName)
    assert prom.GAUGE_LABELS["room_oldest_wait_seconds"] == ("side", "cell")
