"""Prometheus metrics of every long-running role, as Debian's real Prometheus server sees
them: a small pipeline (a send unit, a receive unit, a sweeper, each serving metrics on a
port of its own), a Prometheus scraping them every second, and queries through its HTTP
API while messages go through."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from ops.harness.stack.localstack import free_port
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from router.cli import cli
from router.contract import headers_for
from tests.fixtures.dashboard import expressions
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import http_get as get
from tests.fixtures.helpers import wait_until
from tests.fixtures.paths import ROOT

ROLES = ("send-unit", "receive-unit", "sweeper")


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    """Debian's prometheus (ops/prometheus.sh fetches the package if it is not installed)."""
    proc = subprocess.run(
        [str(ROOT / "ops" / "prometheus.sh"), "ensure"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"Debian's prometheus cannot be installed here: {proc.stderr.strip()}")
    return proc.stdout.strip().splitlines()[-1]


class Prom:
    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, q: str) -> dict[str, float]:
        """An instant query: {role (or the series' labels): value}."""
        status, body = get(f"{self.base}/api/v1/query?{urlencode({'query': q})}")
        assert status == 200, body
        data = json.loads(body)
        assert data["status"] == "success", data
        return {
            r["metric"].get("role", json.dumps(r["metric"], sort_keys=True)): float(r["value"][1])
            for r in data["data"]["result"]
        }

    def until(
        self, q: str, check: Callable[[dict[str, float]], bool], what: str, timeout: float = 30
    ) -> dict[str, float]:
        def seen() -> dict[str, float] | None:
            values = self.query(q)
            return values if check(values) else None

        return wait_until(seen, timeout, what, 0.25, report=lambda: f"{q} -> {self.query(q)}")


@pytest.fixture
def prometheus(
    prometheus_binary: str, pipeline: PipelineFactory, tmp_path: Path
) -> Iterator[tuple[Prom, Pipeline]]:
    p = pipeline(
        PipelineSpec(
            send_units=1,
            receive_units=1,
            sweepers=1,
            send_queues=1,
            send_queue_partitions=2,
            transfer_partitions=2,
            receive_queues=2,
            metrics=True,
            extra_env={"ROUTER_UNIT__METRICS_INTERVAL_MS": "250"},
        )
    )
    targets = [f"127.0.0.1:{proc.metrics_port}" for proc in p.fleet.procs]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                "scrape_configs": [
                    {"job_name": "router", "static_configs": [{"targets": targets}]}
                ],
            }
        )
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    server = subprocess.Popen(
        [
            prometheus_binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: server.poll() is not None or get(f"{base}/-/ready")[0] == 200,
            30,
            "prometheus ready",
        )
        assert server.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
        yield Prom(base), p
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        log.close()


def test_prometheus_sees_every_role_moving(prometheus: tuple[Prom, Pipeline]) -> None:
    prom, p = prometheus
    s = p.settings
    # Every process answers its own health checks (the units hold partitions by now).
    for proc in p.fleet.procs:
        url = f"http://127.0.0.1:{proc.metrics_port}"
        assert get(f"{url}/healthz")[0] == 200, proc.name

        def ready(url: str = url) -> bytes | None:
            status, body = get(f"{url}/readyz")
            return body if status == 200 else None

        body = wait_until(
            ready, 30, f"{proc.name} ready", report=lambda url=url: repr(get(f"{url}/readyz"))
        )
        assert json.loads(body) == {"ready": True, "reasons": []}, body
        # `router health`, what a container healthcheck runs, agrees
        for args in ([], ["--ready"]):
            done = CliRunner().invoke(cli, ["health", "--port", str(proc.metrics_port), *args])
            assert done.exit_code == 0, done.output
    done = CliRunner().invoke(cli, ["health", "--port", str(free_port())])
    assert done.exit_code == 1 and "no answer" in done.output, done.output
    up = prom.until("up", lambda v: len(v) == 3 and all(x == 1 for x in v.values()), "3 up")
    assert len(up) == 3
    before = prom.until(
        "router_messages_in_total", lambda v: set(v) >= {"send-unit", "receive-unit"}, "counters"
    )
    assert before["send-unit"] == before["receive-unit"] == 0, before

    # A group opens (and stays open), with ordinary messages around it.
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    queue = s.topology.send_queues[0]
    for i in range(20):
        producer.produce(queue, f"o{i}".encode(), partition=i % 2, headers=headers_for(None))
    producer.produce(queue, b"G0", partition=0, headers=headers_for("G", seq=0))
    producer.flush(10)
    moved = prom.until(
        "router_messages_in_total",
        lambda v: v.get("send-unit", 0) >= 21 and v.get("receive-unit", 0) >= 21,
        "messages counted by both units",
    )
    assert moved["send-unit"] > before["send-unit"], moved
    # The sweeper sees the group open on both sides, then, once its final went through,
    # closed.
    prom.until(
        'sum by (role) (router_open_groups{role="sweeper"})',
        lambda v: v.get("sweeper") == 2,
        "the sweeper's open groups: one per side",
    )
    producer.produce(queue, b"G1", partition=0, headers=headers_for("G", seq=1, final=True))
    producer.flush(10)
    prom.until(
        'sum by (role) (router_open_groups{role="sweeper"})',
        lambda v: v.get("sweeper") == 0,
        "the sweeper's open groups: none left",
    )
    prom.until("router_finals_total", lambda v: v.get("receive-unit") == 1, "the final forwarded")

    # Every role's series, and the units' histograms and gauges.
    for role in ROLES:
        count = prom.query(f'count by (role) ({{__name__=~"router_.+", role="{role}"}})')
        assert count.get(role, 0) > 40, (role, count)
    for histogram in (
        "hop_latency_seconds",
        "txn_commit_seconds",
        "redis_rtt_seconds",
        "batch_route_seconds",
    ):
        counts = prom.until(
            f"router_{histogram}_count",
            lambda v: v.get("send-unit", 0) > 0 and v.get("receive-unit", 0) > 0,
            f"{histogram} observed by both units",
        )
        assert "sweeper" not in counts or counts["sweeper"] == 0, counts
    p99 = prom.query(
        "histogram_quantile(0.99, sum by (role, le) (rate(router_hop_latency_seconds_bucket[1m])))"
    )
    assert set(p99) >= {"send-unit", "receive-unit"}, p99
    assigned = prom.query("router_assigned_partitions")
    sources = 2 + s.routing.room_partitions  # and their side's waiting room
    assert assigned == {"send-unit": sources, "receive-unit": sources}, assigned
    lag = prom.query('count by (role) (router_source_lag{topic=~".+"})')
    assert lag.get("send-unit", 0) >= 2 and lag.get("receive-unit", 0) >= 2, lag
    assert set(prom.query("router_inflight_batches")) == {"send-unit", "receive-unit"}
    # The waiting room's gauges: the sweeper's for both sides, each unit's for its own.
    rooms = prom.query('count by (role) (router_room_waiting{side=~"send|receive"})')
    assert rooms == {"sweeper": 2, "send-unit": 1, "receive-unit": 1}, rooms
    oldest = prom.query("max by (role) (router_room_oldest_wait_seconds)")
    assert oldest == {"sweeper": 0, "send-unit": 0, "receive-unit": 0}, oldest

    # The dashboard's queries run, and those of the traffic just sent have data.
    results = {}
    for expr in expressions():
        q = expr.replace("$topology", s.topology.name).replace("$__rate_interval", "1m")
        results[expr] = prom.query(q)
    empty = [e for e, r in results.items() if not r]
    assert all(
        not any(m in e for m in ("messages_in", "hop_latency", "txn_commit", "open_groups"))
        for e in empty
    ), empty
