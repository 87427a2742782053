"""The replicated cluster for the replication tests: KRaft, one controller and three
brokers (ops/ha.sh), on free ports in a folder of this session's own; started on first
use, stopped at the end. The shared stack's Kafka is untouched (its Redis holds the
tables, under each run's own names).

Tests marked `ha` are the heavy ones (50,000 messages through broker kills, and the
600-message broker kill while it is not yet shown reliable on a loaded 2-core run): they
run with `make test-ha` (ROUTER_TEST_HA=1) and are skipped by `make test`, which runs the
short topic-replication check."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.harness.stack.hacluster import HaCluster
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from router.config import RedisSettings, RouterSettings
from tests.fixtures.factories import HaPipelineFactory
from tests.fixtures.helpers import unique
from tests.fixtures.private import heavy_only_with, private_servers

pytest_collection_modifyitems = heavy_only_with(
    "ha", "ROUTER_TEST_HA", "heavy replication test: run by make test-ha"
)


@pytest.fixture(scope="session")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaCluster]:
    yield from private_servers(HaCluster.private, "ha.sh", tmp_path_factory, "replicated cluster")


@pytest.fixture
def ha_settings(ha_cluster: HaCluster, redis_url: str) -> RouterSettings:
    """Settings for the cluster; replication left to `router.topology.topics.replication`."""
    return RouterSettings(
        kafka=ha_cluster.kafka_settings(),
        redis=RedisSettings(url=redis_url, key_prefix="router-test"),
    )


@pytest.fixture
def ha_pipeline(
    ha_cluster: HaCluster, ha_settings: RouterSettings, tmp_path: Path
) -> Iterator[HaPipelineFactory]:
    """Whole topologies on the cluster; every broker is running again, and the run's
    processes stopped and its topics deleted, afterwards."""
    started: list[Pipeline] = []

    def make(spec: PipelineSpec | None = None) -> Pipeline:
        p = Pipeline(
            ha_settings, spec or PipelineSpec(), tmp_path / f"ha-{len(started)}", name=unique("ha")
        )
        started.append(p)
        p.start(ready_timeout=120)
        return p

    yield make
    for broker in (1, 2, 3):
        ha_cluster.start(broker)  # a no-op for a running one
    for p in started:
        p.stop()
        p.cleanup()
