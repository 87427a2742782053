"""Serving `router.metrics.prom` over HTTP (`metrics.port`; 0: off), and what each role feeds it.

One daemon thread serves /metrics, /healthz and /readyz. Everything the loop measures
reaches Prometheus through the loop's own objects: counters and timings through
`Metrics`, liveness through the publisher's beat, and, once per metrics interval (the
publisher's hook, on the loop's thread), the servers' health and the refreshed gauges:
open groups per destination (one HGETALL of the table's load hash) and lag per source
partition (the consumer's position and cached high watermark: no broker call).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector

from router.config.settings import RouterSettings
from router.metrics.prom import Gauges, Health, Histograms, RouterCollector, app
from router.metrics.registry import Metrics, MetricsPublisher

log = logging.getLogger("router.exporter")

Refresh = Callable[[Gauges, bool], None]  # the gauges, and whether Redis answered


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape per second is not news


class Exporter:
    """The metrics endpoint of one process; inert when `metrics.port` is 0."""

    def __init__(
        self,
        settings: RouterSettings,
        role: str,
        metrics: Metrics,
        publisher: MetricsPublisher,
        *,
        refresh: Refresh | None = None,
        live: dict[Any, Callable[[], float]] | None = None,
        assigned: Callable[[], int] | None = None,
        waiting: Callable[[], str | None] = lambda: None,
        period_s: float = 0.0,  # how long the loop may sleep between rounds
    ) -> None:
        self.settings, self.metrics = settings.metrics, metrics
        self.enabled = self.settings.port != 0
        self._server: _Server | None = None
        if not self.enabled:
            return
        topology = settings.topology.name
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self.gauges = Gauges(live=dict(live or {}))
        self.registry.register(RouterCollector(metrics, self.gauges, topology, role))
        metrics.sink = Histograms(self.registry, topology, role)
        interval = settings.unit.metrics_interval_ms / 1000
        self.health = Health(
            lambda: publisher.beat,
            self.settings.liveness_timeout_s + period_s,
            max(10.0, 3 * interval, 3 * period_s),
            assigned,
            waiting,
        )
        self._refresh = refresh
        publisher.hooks.append(self._tick)

    def _tick(self, published: bool) -> None:
        self.health.tick(self.metrics.snapshot(), published, time.monotonic())
        if self._refresh is not None:
            try:
                self._refresh(self.gauges, published)
            except Exception:  # gauges must never stop the loop: say so, and go on
                log.exception("could not refresh the gauges this interval")

    def start(self) -> None:
        if not self.enabled:
            return
        host, port = self.settings.host, self.settings.port
        try:
            server = make_server(
                host, port, app(self.registry, self.health), _Server, handler_class=_Quiet
            )
        except OSError as exc:
            raise RuntimeError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
        self._server = server
        threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
        log.info("metrics on http://%s:%d/metrics, /healthz, /readyz", host, port)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
