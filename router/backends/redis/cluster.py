"""The router's Redis Cluster client (`redis.cluster_nodes`): redis-py's `RedisCluster`, failing
fast as the single-node client does, and per-node commands sent to the node that holds a
table's slot.

Every table's keys carry one hash tag (`<prefix>:{<topology>:<side>}:*`), so each script,
pipeline and multi-key command of a table goes to the one primary holding that slot;
redis-py follows MOVED and ASK itself. The client makes no retries of its own (a unit
decides when to retry, as on one Redis): a node that does not answer, a slot no node
covers yet (a failover under way) or a cluster that answers none of its seed nodes is a
`redis.ConnectionError`, which every caller already handles as "Redis away" (redis-py
raises those as `RedisClusterException`, outside its `RedisError` tree).

`WAIT` and `TIME` concern one node: `node_options(client, key)` names the primary of `key`'s
slot for them (redis-py would send them to a default node, which may hold nothing of the
table).
"""

from __future__ import annotations

from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from router.config.servers import RedisSettings


class _Pipeline(ClusterPipeline):
    """A cluster pipeline whose cluster-level failures are `redis.ConnectionError`s."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except RedisClusterException as exc:
            raise unavailable(exc) from exc


class RouterCluster(RedisCluster):
    """`RedisCluster` whose cluster-level failures are `redis.ConnectionError`s."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisClusterException as exc:
            raise unavailable(exc) from exc

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe: ClusterPipeline = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        pipe.__class__ = _Pipeline  # the same object, its execute() wrapped
        return pipe

    def register_script(self, script: Any) -> Script:
        """A script run by SHA on the node of its keys' slot (redis-py types the owner as a
        single-node client)."""
        return Script(cast(Any, self), script)

    def refresh(self) -> None:
        """Ask the nodes for the slots anew (a node answered that it is a replica now)."""
        try:
            self.nodes_manager.initialize()
        except RedisClusterException as exc:
            raise unavailable(exc) from exc


def unavailable(exc: RedisClusterException) -> redis.ConnectionError:
    return redis.ConnectionError(f"Redis Cluster unavailable: {exc}")


def cluster_client(settings: RedisSettings, options: dict[str, Any]) -> RouterCluster:
    """A client of the cluster whose seed nodes are `redis.cluster_nodes` (`options`: the
    connection options of `router.backends.redis.client.connection_options`, every node's)."""
    node: Any = ClusterNode  # untyped in redis-py
    nodes = [node(host, port) for host, port in settings.cluster_addresses()]
    node_options = {k: v for k, v in options.items() if k != "retry"}  # none per node anyway
    if settings.tls:
        node_options["ssl"] = True
    try:
        return RouterCluster(
            startup_nodes=nodes,
            retry=Retry(NoBackoff(), 0),
            # A failover or a slot move: the next command finds the new owner (MOVED).
            reinitialize_steps=1,
            **node_options,
        )
    except RedisClusterException as exc:
        raise redis.ConnectionError(
            f"Redis Cluster at {settings.where()}: none of its nodes answered ({exc})"
        ) from exc


def node_options(client: Any, key: str) -> dict[str, Any]:
    """How to send a one-node command (WAIT, TIME) to the node holding `key`'s table: the
    primary of its slot on a cluster, nothing to add on one Redis."""
    if isinstance(client, RedisCluster):
        try:
            return {"target_nodes": cast(Any, client).get_node_from_key(key)}
        except RedisClusterException as exc:
            raise unavailable(exc) from exc
    return {}
