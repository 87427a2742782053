"""Redis Cluster settings without servers (`redis.cluster_nodes`): their validation, and the
pure parts of the cluster client (the exception mapping, which node a one-node command
goes to on one Redis). The client itself is exercised on a real cluster
(tests/integration/cluster)."""

from __future__ import annotations

import pytest
import redis
from pydantic import ValidationError
from redis.exceptions import RedisClusterException

from ops.harness.stack.localstack import free_port
from router.backends.redis.client import await_cluster, redis_client
from router.backends.redis.cluster import node_options, unavailable
from router.config import RedisSettings, RouterSettings
from router.security.redis import acl_rule

NODES = ("127.0.0.1:6401", "[::1]:6402", "redis-3.example:6403")


def test_cluster_nodes_are_off_by_default() -> None:
    assert RedisSettings().cluster_nodes == ()


def test_cluster_nodes_are_host_port_pairs() -> None:
    r = RedisSettings(cluster_nodes=NODES)
    assert r.cluster_addresses() == [
        ("127.0.0.1", 6401),
        ("::1", 6402),
        ("redis-3.example", 6403),
    ]
    assert r.where() == f"Redis Cluster at {','.join(NODES)}"


@pytest.mark.parametrize("bad", ["127.0.0.1", ":6379", "host:", "host:0", "host:65536"])
def test_a_node_that_is_not_host_port_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match=r"redis.cluster_nodes: .* is not host:port"):
        RedisSettings(cluster_nodes=(bad,))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"sentinels": ("127.0.0.1:26391",), "sentinel_service": "router"},
            "redis.cluster_nodes \\(Redis Cluster\\) or redis.sentinels",
        ),
        ({"url": "unix:///tmp/r.sock"}, "not unix://"),
        ({"url": "redis://127.0.0.1:6379/3"}, "database 0 only"),
    ],
)
def test_inconsistent_cluster_settings_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RedisSettings(cluster_nodes=NODES, **fields)  # type: ignore[arg-type]


def test_tls_and_database_zero_are_accepted() -> None:
    r = RedisSettings(cluster_nodes=NODES, url="rediss://ignored:6379/0", tls_verify=False)
    assert r.tls


def test_a_cluster_none_of_whose_nodes_answers_is_a_connection_error() -> None:
    """No retries, no hang: the units and the sweeper treat it as Redis away."""
    settings = RedisSettings(cluster_nodes=(f"127.0.0.1:{free_port()}",), socket_timeout_s=0.5,
                             replica_ack_timeout_ms=100)  # fmt: skip
    with pytest.raises(redis.ConnectionError, match="none of its nodes answered"):
        redis_client(settings)


def test_cluster_level_failures_are_connection_errors() -> None:
    exc = unavailable(RedisClusterException("slot 12 is not covered"))
    assert isinstance(exc, redis.ConnectionError) and "slot 12" in str(exc)


def test_one_redis_needs_no_target_node() -> None:
    client = redis_client(RedisSettings())  # nothing connects until a command is sent
    assert node_options(client, "router:{shop:send}:entries") == {}


def test_the_acl_rule_allows_what_the_cluster_client_asks_only_on_a_cluster() -> None:
    on_cluster = acl_rule(RouterSettings(redis=RedisSettings(cluster_nodes=NODES)))
    assert {"+cluster|slots", "+command"} <= set(on_cluster)
    assert not {"+cluster|slots", "+command"} & set(acl_rule(RouterSettings()))


def test_a_unit_waits_for_a_cluster_that_does_not_answer_yet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As for one Redis: tried again with a back-off, said in the log, never a crash."""
    dead = RedisSettings(cluster_nodes=(f"127.0.0.1:{free_port()}",), socket_timeout_s=0.5,
                         replica_ack_timeout_ms=100)  # fmt: skip
    with pytest.raises(redis.ConnectionError, match="none of its nodes answered"):
        await_cluster(dead, 0.01, 0.02, attempts=3)
    assert caplog.text.count("trying again in") == 2
    await_cluster(RedisSettings(), 0.01, 0.02, attempts=1)  # one Redis: nothing to wait for
