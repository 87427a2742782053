"""A Redis Cluster for the cluster tests: three primaries with one replica each
(ops/cluster.sh), on free ports in a folder of this session's own; started on first use,
stopped at the end. The shared stack's Redis is untouched; its Kafka carries the runs,
under each run's own names.

Tests marked `cluster` are the heavy ones (a primary SIGKILLed under load): they run with
`make test-cluster` (ROUTER_TEST_CLUSTER=1) and are skipped by `make test`, which runs the
short ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stack.rediscluster import ClusterSet
from router.config import KafkaSettings, RouterSettings
from tests.fixtures.factories import ClusterPipelineFactory
from tests.fixtures.helpers import unique
from tests.fixtures.private import heavy_only_with, private_servers

pytest_collection_modifyitems = heavy_only_with(
    "cluster", "ROUTER_TEST_CLUSTER", "heavy Redis Cluster test: run by make test-cluster"
)


@pytest.fixture(scope="session")
def cluster_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSet]:
    yield from private_servers(ClusterSet.private, "cluster.sh", tmp_path_factory, "Redis Cluster")


@pytest.fixture
def whole_cluster(cluster_set: ClusterSet) -> ClusterSet:
    """The cluster with all six nodes running and every primary's replica online (a test
    before may have killed one)."""
    for node in range(1, 7):
        cluster_set.resume(node)  # a no-op unless paused
        cluster_set.start(node)  # a no-op if running
    cluster_set.wait_whole()
    return cluster_set


@pytest.fixture
def cluster_pipeline(
    whole_cluster: ClusterSet, kafka_bootstrap: str, tmp_path: Path
) -> Iterator[ClusterPipelineFactory]:
    """Whole topologies whose tables live on the cluster (`redis` settings on top); the
    run's processes stopped and its topics and tables deleted afterwards."""
    started: list[Pipeline] = []

    def make(spec: PipelineSpec, **redis: object) -> Pipeline:
        settings = RouterSettings(
            kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
            redis=whole_cluster.redis_settings(key_prefix="router-test", **redis),
        )
        p = Pipeline(settings, spec, tmp_path / f"c-{len(started)}", name=unique("cluster"))
        started.append(p)
        p.start(ready_timeout=90)
        return p

    yield make
    for node in range(1, 7):
        whole_cluster.resume(node)
        whole_cluster.start(node)
    whole_cluster.wait_whole()
    for p in started:
        p.stop()
        p.cleanup()


@pytest.fixture(scope="session")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSet]:
    """A second cluster, TLS only and ACL users only (ROUTER_CLUSTER_TLS=1)."""
    yield from private_servers(
        ClusterSet.private_tls, "cluster.sh", tmp_path_factory, "Redis Cluster (TLS, ACL)"
    )
