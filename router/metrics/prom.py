"""Prometheus metrics, liveness and readiness of one process, as pure parts: the series
(named by the registry in `router.metrics.registry`), a collector, the health rules and the WSGI
app. The HTTP server and what each role feeds in: `router.metrics.exporter`.

* Counters: one per `MetricName`, `router_<name>_total`, read from the process's
  `Metrics` when scraped (the hot loop only adds to a dict, as before).
* Histograms: one per `HistogramName`, `router_<name>`, fed by `Metrics.observe`.
* Gauges: one per `GaugeName`, `router_<name>`, from values a role refreshes every
  `unit.metrics_interval_ms` (or reads when scraped).

Every series has the labels `topology` and `role`; docs/reference/metrics.md lists them all.
"""

from __future__ import annotations

import json
import time
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from router.metrics.registry import GaugeName, HistogramName, MetricName, Metrics

PREFIX = "router_"
LABELS = ("topology", "role")
GAUGE_LABELS: dict[GaugeName, tuple[str, ...]] = {
    "open_groups": ("side", "cell", "destination"),
    "source_lag": ("topic", "partition"),
    "inflight_batches": (),
    "assigned_partitions": (),
    "room_waiting": ("side", "cell"),
    "room_oldest_wait_seconds": ("side", "cell"),
}
BUCKETS: dict[HistogramName, tuple[float, ...]] = {
    "batch_route_seconds": (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
    "hop_latency_seconds": (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    "txn_commit_seconds": (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30),
    "redis_rtt_seconds": (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1),
}


@dataclass(frozen=True)
class Series:
    name: str  # as Prometheus stores it (counters end in _total)
    kind: str  # counter, histogram, gauge
    labels: tuple[str, ...]


def series() -> list[Series]:
    """Every series a router process exposes, from the typed registry."""
    out = [Series(f"{PREFIX}{n}_total", "counter", LABELS) for n in typing.get_args(MetricName)]
    out += [Series(f"{PREFIX}{n}", "histogram", LABELS) for n in typing.get_args(HistogramName)]
    out += [
        Series(f"{PREFIX}{n}", "gauge", (*LABELS, *GAUGE_LABELS[n]))
        for n in typing.get_args(GaugeName)
    ]
    return out


def stored_names() -> set[str]:
    """The names PromQL can use: a histogram's _bucket, _sum and _count."""
    names = set()
    for s in series():
        parts = ("_bucket", "_sum", "_count") if s.kind == "histogram" else ("",)
        names |= {s.name + p for p in parts}
    return names


@dataclass
class Gauges:
    """Gauge values of one process: `values` refreshed by its role (label values beyond
    topology and role -> value), `live` read when scraped."""

    values: dict[GaugeName, dict[tuple[str, ...], float]] = field(default_factory=dict)
    live: dict[GaugeName, Callable[[], float]] = field(default_factory=dict)


class RouterCollector(Collector):
    def __init__(self, metrics: Metrics, gauges: Gauges, topology: str, role: str) -> None:
        self.metrics, self.gauges, self.base = metrics, gauges, [topology, role]

    def collect(self) -> Iterator[Metric]:
        counts = self.metrics.snapshot()  # one C-level copy: safe beside the loop thread
        for name in typing.get_args(MetricName):
            c = CounterMetricFamily(f"{PREFIX}{name}", f"router counter {name}", labels=LABELS)
            c.add_metric(self.base, counts.get(name, 0))
            yield c
        gauges = self.gauges
        for gname in typing.get_args(GaugeName):
            g = GaugeMetricFamily(
                f"{PREFIX}{gname}", f"router gauge {gname}", labels=(*LABELS, *GAUGE_LABELS[gname])
            )
            if gname in gauges.live:
                g.add_metric(self.base, gauges.live[gname]())
            for key, value in list(gauges.values.get(gname, {}).items()):
                g.add_metric([*self.base, *key], value)
            yield g


class Histograms:
    """The histograms of one process, as `Metrics.sink`."""

    def __init__(self, registry: CollectorRegistry, topology: str, role: str) -> None:
        self._by_name = {
            name: Histogram(
                f"{PREFIX}{name}",
                f"router histogram {name}",
                LABELS,
                registry=registry,
                buckets=BUCKETS[name],
            ).labels(topology, role)
            for name in typing.get_args(HistogramName)
        }

    def __call__(self, name: HistogramName, seconds: float) -> None:
        self._by_name[name].observe(seconds)


@dataclass
class Signal:
    """The outcome of a process's interactions with one server, by monotonic time."""

    failed_at: float | None = None
    ok_at: float | None = None

    def note(self, failed: bool, succeeded: bool, now: float) -> None:
        if succeeded:  # in the same interval as a failure: it answers again
            self.ok_at = now
        elif failed:
            self.failed_at = now

    def failing(self, now: float, window: float) -> float | None:
        """Seconds since the last failure, if none succeeded since and it is recent."""
        f = self.failed_at
        if f is None or (self.ok_at is not None and self.ok_at >= f) or now - f > window:
            return None
        return now - f


class Health:
    """/healthz and /readyz of one process. `beat` is when its loop last came round
    (None: not yet, counted from its start); `assigned` (units only) the partitions it
    holds; `waiting` why it is backing off (None: it is not)."""

    def __init__(
        self,
        beat: Callable[[], float | None],
        liveness_s: float,
        window_s: float,
        assigned: Callable[[], int] | None = None,
        waiting: Callable[[], str | None] = lambda: None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.beat, self.liveness_s, self.window_s = beat, liveness_s, window_s
        self.assigned, self.waiting = assigned, waiting
        self.started = now()
        self.redis, self.kafka = Signal(), Signal()
        self._seen: dict[str, int] = {}

    def tick(self, counts: dict[str, int], published: bool, now: float) -> None:
        """Once per metrics interval (on the loop's thread): what this interval's counters
        and the Redis publication say about the servers."""
        seen = self._seen

        def delta(*names: str) -> int:
            return sum(counts.get(n, 0) - seen.get(n, 0) for n in names)

        # The publication is the interval's last Redis call; errors before it count unless
        # a round trip of the loop succeeded too.
        errors, trips = delta("redis_errors"), delta("redis_round_trips")
        self.redis.note(not published or errors > 0, published and (not errors or trips > 0), now)
        self.kafka.note(delta("kafka_errors") > 0, delta("txn_commits") > 0, now)
        self._seen = dict(counts)

    def liveness(self, now: float) -> tuple[bool, dict[str, Any]]:
        beat = self.beat()
        since = now - (self.started if beat is None else beat)
        return since <= self.liveness_s, {"alive": since <= self.liveness_s, "loop_s": since}

    def readiness(self, now: float) -> tuple[bool, dict[str, Any]]:
        reasons = []
        alive, body = self.liveness(now)
        if not alive:
            reasons.append(f"the loop has not come round for {body['loop_s']:.0f} s")
        if self.assigned is not None and self.assigned() == 0:
            reasons.append("no partitions assigned")
        waiting = self.waiting()
        if waiting:
            reasons.append(waiting)
        for server, signal in (("Redis", self.redis), ("Kafka", self.kafka)):
            ago = signal.failing(now, self.window_s)
            if ago is not None:
                reasons.append(f"{server}: the last interaction failed {ago:.1f} s ago")
        body = {"ready": not reasons, "reasons": reasons}
        return not reasons, body


def app(
    registry: CollectorRegistry, health: Health, now: Callable[[], float] = time.monotonic
) -> Callable[..., Iterable[bytes]]:
    """WSGI: /metrics (Prometheus's text format), /healthz, /readyz (JSON; 503 if not)."""
    metrics_app = make_wsgi_app(registry)

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in ("/healthz", "/readyz"):
            check = health.liveness if path == "/healthz" else health.readiness
            ok, body = check(now())
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "application/json")])
            return [json.dumps(body).encode()]
        if path == "/metrics":
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"/metrics, /healthz or /readyz\n"]

    return dispatch
