"""The one way the router builds a Redis client: the units, the sweeper, the operator
commands and the client libraries' state all come here (`redis_client` here).

With `redis.cluster_nodes`, a client of that Redis Cluster (`router.backends.redis.cluster`):
each table's commands go to the primary holding its slot.

Without `redis.sentinels`, a client of the server at `redis.url`. With them, a client of
whichever primary the Sentinels name for `redis.sentinel_service` (redis-py's
`Sentinel.master_for`): every new connection asks them, a connection to a former primary
is dropped when it answers READONLY (redis-py turns that into a ConnectionError), so after
a failover the units' retry reconnects to the new primary by itself. The ACL user,
password and TLS settings apply to the Sentinels and the data connections alike. With
`redis.address_map`, every data-node address the Sentinels announce is mapped first
(`router.backends.redis.addressmap`: NAT, port forwarding).

Every client fails fast (no retries inside redis-py: the units decide when to retry) and
counts the connections it makes (`connects`), so that a unit can tell whether its WAIT runs
on the connection that made its writes (`router.unit.commit.replica_acks`).
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from router.backends.redis.addressmap import AddressMap, MappedSentinel
from router.backends.redis.cluster import RouterCluster, cluster_client
from router.config.servers import RedisSettings
from router.errors import ConfigError

log = logging.getLogger("router.redis")

# What `redis_client` returns: one Redis (or Sentinel's primary), or a Redis Cluster.
RedisClient = redis.Redis | RouterCluster


class Connects:
    """A client's `redis_connect_func`: the usual handshake (AUTH, SELECT, ...), counted.
    A cluster client makes the handshake itself before calling it (`handshake` False)."""

    def __init__(self, handshake: bool = True) -> None:
        self.count = 0
        self.handshake = handshake

    def __call__(self, connection: Any) -> None:  # a redis.connection.AbstractConnection
        if self.handshake:
            connection.on_connect()
        self.count += 1


def redis_client(settings: RedisSettings) -> RedisClient:
    """A Redis client that fails fast, with an ACL user and password, over TLS for a
    rediss:// URL (see `router.security.redis`), through Sentinel if `redis.sentinels` is set,
    of a Redis Cluster if `redis.cluster_nodes` is (a cluster none of whose seed nodes
    answers: redis.ConnectionError now)."""
    options = connection_options(settings)
    if settings.cluster_nodes:
        return cluster_client(settings, {**options, "redis_connect_func": Connects(False)})
    if not settings.sentinels:
        return redis.Redis.from_url(settings.url, redis_connect_func=Connects(), **options)
    assert settings.sentinel_service is not None  # the settings require it with sentinels
    tls = {"ssl": True} if settings.tls else {}
    sentinel: Any = MappedSentinel(  # redis-py leaves master_for untyped
        settings.sentinel_addresses(),
        AddressMap.parse(settings.address_map),
        sentinel_kwargs={**options, **tls},
        **options,
        **tls,
    )
    client: redis.Redis = sentinel.master_for(
        settings.sentinel_service,
        db=database(settings.url),
        health_check_interval=30,
        redis_connect_func=Connects(),
    )
    return client


def await_cluster(
    settings: RedisSettings, first_s: float, max_s: float, attempts: int | None = None
) -> None:
    """Before a unit or the sweeper builds its clients: until a node of the cluster answers,
    backing off from `first_s` to `max_s` (a cluster client asks its nodes for the slots
    when it is built, so a process started before its cluster would fail instead of
    waiting for it as it does for one Redis). Nothing to do without `redis.cluster_nodes`;
    the last error after `attempts` tries (None: no limit)."""
    delay, tried = first_s, 0
    while settings.cluster_nodes:
        try:
            cluster_client(settings, connection_options(settings)).close()
            return
        except redis.ConnectionError as exc:
            tried += 1
            if attempts is not None and tried >= attempts:
                raise
            log.warning("%s; trying again in %.1f s", exc, delay)
        time.sleep(delay)  # a start-up back-off, not synchronisation
        delay = min(max_s, delay * 2)


def database(url: str) -> int:
    """The database number of a redis:// URL ("/0"; none: 0)."""
    path = urlsplit(url).path.strip("/")
    if path and not path.isdigit():
        raise ConfigError(f"redis.url {url!r}: the path must be a database number")
    return int(path or 0)


def connection_options(settings: RedisSettings) -> dict[str, Any]:
    """What every connection of the client gets, Sentinels included: timeouts, no
    retries, credentials and TLS (secrets read now, never at import time)."""
    options: dict[str, Any] = {
        "password": settings.secret(),
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.socket_timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    if settings.username is not None:
        options["username"] = settings.username
    if settings.tls:
        verify = settings.tls_verify
        options.update(
            ssl_cert_reqs="required" if verify else "none",
            ssl_check_hostname=verify,
            ssl_ca_certs=str(settings.tls_ca_file) if settings.tls_ca_file else None,
            ssl_certfile=str(settings.tls_cert_file) if settings.tls_cert_file else None,
            ssl_keyfile=str(settings.tls_key_file) if settings.tls_key_file else None,
        )
    if not settings.sentinels:
        options["health_check_interval"] = 30
    return options


def connects(client: RedisClient) -> int | None:
    """How many connections `client` has made so far (None: not built here); on a cluster,
    to any of its nodes."""
    if isinstance(client, RouterCluster):
        func = client.user_on_connect_func
    else:
        func = client.connection_pool.connection_kwargs.get("redis_connect_func")
    return func.count if isinstance(func, Connects) else None


def reconnect(client: RedisClient) -> None:
    """After a node answered that it is a replica now: connections anew (Sentinel: to the
    primary it names), or the cluster's slots asked anew."""
    if isinstance(client, RouterCluster):
        client.refresh()
    else:
        client.connection_pool.disconnect()
