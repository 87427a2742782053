"""A unit's wait for Redis replicas (`router.unit.commit.replica_acks` has the rule): WAIT on the
unit's own client, once per batch, before its commit.

WAIT counts the replicas holding every write of the connection it runs on. A unit's
client is used by its loop thread alone, so its commands share one connection (the
release after a commit, on the session's call thread, has a client of its own:
`router.unit.steps.pipeline`); the client counts its connections
(`router.backends.redis.client.connects`), and a batch whose connection was made anew after its
first table write is refused rather than trusted.

On a Redis Cluster, WAIT goes to the primary holding the table's slot (`key`), the node of
the batch's table writes: it counts that node's replicas (`router.backends.redis.cluster`).
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from router.backends.redis.client import RedisClient, connects, reconnect
from router.backends.redis.cluster import node_options
from router.config.settings import RedisSettings
from router.metrics.registry import Metrics
from router.unit.commit.replica_acks import AckRule, NotReplicated


class ReplicaAcks:
    def __init__(
        self, client: RedisClient, settings: RedisSettings, metrics: Metrics, key: str
    ) -> None:
        self.client = client
        self.key = key  # a key of the table: on a cluster, WAIT runs on its node
        self.rule = AckRule(settings.min_replica_acks, settings.replica_ack_timeout_ms)
        self.metrics = metrics
        self._since: int | None = None

    def begin(self) -> None:
        """Before the batch's first table write."""
        if self.rule.waits:
            self._since = connects(self.client)

    def confirm(self, fail: Callable[[str], Exception]) -> None:
        """After the batch's last table write, before its commit: return once enough
        replicas hold the writes; else raise what `fail` (the unit's session) makes of
        "Redis unavailable, nothing forwarded", as a route call that cannot reach Redis
        does: the batch is not forwarded, the unit backs off and retries."""
        try:
            self.wait()
        except redis.RedisError as exc:
            raise fail(f"Redis unavailable, nothing forwarded: {exc}") from exc

    def wait(self) -> None:
        """WAIT for the replicas; a redis.ConnectionError (NotReplicated if too few
        acknowledged in time, or if the connection was made anew since `begin`)."""
        rule = self.rule
        if not rule.waits:
            return
        try:
            target = node_options(self.client, self.key)
            acked = int(self.client.wait(*rule.wait_args(), **target))  # type: ignore[arg-type]
        except redis.RedisError as exc:
            self.metrics.inc("redis_errors")
            if isinstance(exc, redis.ResponseError):  # "WAIT cannot be used with replica
                reconnect(self.client)  # instances": ask the Sentinels (the cluster) anew
            raise redis.ConnectionError(f"WAIT for replicas failed: {exc}") from exc
        self.metrics.inc("redis_round_trips")
        reason = rule.shortfall(acked, connects(self.client) != self._since)
        if reason is not None:
            self.metrics.inc("replica_acks_missing")
            raise NotReplicated(reason)
