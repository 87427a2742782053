"""The tables on a Redis Cluster that speaks TLS only and knows ACL users only
(ops/cluster.sh with ROUTER_CLUSTER_TLS=1; `make test-cluster`): the units and the sweeper
reach it over TLS as a least-privilege user (`router acls plan`'s Redis rule, set on every
node), wait for a replica on their table's node, and route grouped traffic whole; a user
whose rule names another topology is refused at start-up, saying so."""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stack.rediscluster import ClusterSet
from ops.harness.traffic.collect import verdict
from router.backends.redis.client import redis_client
from router.config import KafkaSettings, RouterSettings, TopologySettings
from router.security.redis import RedisRefused, acl_rule, check_access
from tests.fixtures.helpers import unique
from tests.fixtures.judged import Arrivals, assert_whole, finish, send

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROLES = ("send-unit", "receive-unit", "sweeper")


def make_user(c: ClusterSet, name: str, settings: RouterSettings, folder: Path) -> Path:
    """`ACL SETUSER name on >password <the router's rule for settings>` on every node (ACLs
    are per node in a cluster); the password's file."""
    password = secrets.token_hex(16)
    admin: Any = redis_client(c.redis_settings())
    for node in admin.get_nodes():
        admin.execute_command(
            "ACL", "SETUSER", name, "reset", "on", f">{password}", *acl_rule(settings),
            target_nodes=node,
        )  # fmt: skip
    file = folder / f"{name}.password"
    file.write_text(password + "\n")
    file.chmod(0o600)
    return file


def test_units_reach_a_tls_acl_cluster_as_a_least_privilege_user(
    tls_cluster: ClusterSet, kafka_bootstrap: str, tmp_path: Path
) -> None:
    tls_cluster.wait_whole()
    admin_env = {
        "ROUTER_REDIS__URL": "rediss://127.0.0.1/0",
        "ROUTER_REDIS__TLS_CA_FILE": str(tls_cluster.cluster_dir / "pki" / "ca.pem"),
        "ROUTER_REDIS__USERNAME": "admin",
        "ROUTER_REDIS__PASSWORD_FILE": str(tls_cluster.admin_password_file),
    }
    spec = PipelineSpec(
        send_units=1,
        receive_units=1,
        send_queues=1,
        send_queue_partitions=2,
        transfer_partitions=2,
        receive_queues=3,
        extra_env=admin_env,
    )
    base = RouterSettings(
        kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
        redis=tls_cluster.redis_settings(
            key_prefix="router-test", min_replica_acks=1, replica_ack_timeout_ms=500
        ),
    )
    p = Pipeline(base, spec, tmp_path / "run", name=unique("cluster-tls"))
    try:
        user = f"{p.name}-router"
        password_file = make_user(tls_cluster, user, p.settings, tmp_path)
        role = {"ROUTER_REDIS__USERNAME": user, "ROUTER_REDIS__PASSWORD_FILE": str(password_file)}
        p.spec = replace(p.spec, role_env=dict.fromkeys(ROLES, role))
        p.start(ready_timeout=90)
        collector = Arrivals(p)
        try:
            sent = send(p, "a", 300)
            assert collector.wait_for(len(sent.sent), 90), f"{collector.count()} of 300"
        finally:
            collector.stop()
        send_side, receive = finish(p)
        assert_whole(verdict(sent.sent, send_side, receive), 300)

        # The same user for another topology: refused, with what to fix.
        other = p.settings.model_copy(
            update={
                "topology": TopologySettings(name=unique("elsewhere")),
                "redis": p.settings.redis.model_copy(
                    update={"username": user, "password_file": password_file}
                ),
            }
        )
        with pytest.raises(RedisRefused, match="lacks a permission"):
            check_access(redis_client(other.redis), other)
    finally:
        p.stop()
        p.cleanup()
