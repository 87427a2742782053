"""Redis access control: the least-privilege ACL of the router's Redis user, and a clear
word when Redis refuses us (as opposed to being away).

Every unit, the sweeper and the operator commands (`router table`, `router metrics`,
`router console`) need the same small set: the commands below, on the keys of their
topology's two tables and its metrics hashes, and no Pub/Sub channel. `router acls plan`
prints the rule; `ACL SETUSER <user> <rule...>` (as an admin) creates the user, on every
node of a Redis Cluster (ACLs are per node there), where the rule also allows what the
cluster client asks (`CLUSTER_COMMANDS`).
"""

from __future__ import annotations

import redis
from redis.exceptions import AuthenticationError, NoPermissionError

from router.backends.redis.client import RedisClient
from router.config.settings import RouterSettings
from router.errors import RouterError
from router.table.store.codec import Side, TableKeys
from router.topology import cells

SIDES: tuple[Side, ...] = ("send", "receive")

# Commands the Lua scripts run (router/table/store/lua/*.lua: Redis checks them against the caller).
SCRIPT_COMMANDS = (
    *("get", "set", "incr", "hget", "hset", "hdel", "hexists", "hgetall", "hincrby", "hmget"),
    *("rpush", "smembers", "time", "zadd", "zcard", "zrange", "zrangebyscore", "zrem"),
    *("zremrangebyscore", "zscore", "zrank", "lrange", "ltrim"),
)
# Commands the Python side sends: the scripts by SHA (loaded on NOSCRIPT), table reads,
# the sweeper's outbox, steering (router table drain/undrain), metrics publication and
# reading, health checks, and the units' wait for replicas (redis.min_replica_acks).
CLIENT_COMMANDS = (
    *("evalsha", "script|load", "ping", "lrange", "sadd", "srem"),
    *("expire", "scan", "wait"),
)
# On a Redis Cluster (`redis.cluster_nodes`), what redis-py's cluster client asks every node
# it meets: the slots' owners, and the command table it finds keys with.
CLUSTER_COMMANDS = ("cluster|slots", "command")


def key_patterns(settings: RouterSettings) -> list[str]:
    """The key patterns of the topology's tables (each cell's: `router.topology.cells`) and
    metrics (`router.table.store.codec`, `router.metrics.registry.metrics_key`): nothing else
    in Redis."""
    prefix, name = settings.redis.key_prefix, settings.topology.name
    tables = [
        TableKeys.of(prefix, cells.tag(name, c), side).entries.rsplit(":", 1)[0]
        for c in cells.all_cells(settings)
        for side in SIDES
    ]
    return [*(f"{base}:*" for base in tables), f"{prefix}:metrics:{name}:*"]


def acl_rule(settings: RouterSettings) -> list[str]:
    """The router user's ACL rule (without its password): `ACL SETUSER <user> on
    >password <rule...>`. `resetchannels` and `-@all` first: nothing but what is listed."""
    keys = [f"~{_glob_escape(p)}" for p in key_patterns(settings)]
    cluster = CLUSTER_COMMANDS if settings.redis.cluster_nodes else ()
    commands = [f"+{c}" for c in sorted({*SCRIPT_COMMANDS, *CLIENT_COMMANDS, *cluster})]
    return ["resetkeys", "resetchannels", "-@all", *keys, *commands]


def _glob_escape(pattern: str) -> str:
    """Redis key patterns are globs: escape the characters that are special in one (a
    topology name may hold none of them, a key prefix might), keeping the trailing '*'."""
    body, star = (pattern[:-1], "*") if pattern.endswith("*") else (pattern, "")
    for ch in "\\?*[]":
        body = body.replace(ch, "\\" + ch)
    return body + star


def refused(exc: BaseException, settings: RouterSettings) -> str | None:
    """If Redis refused us (bad credentials, or an ACL that lacks a command or key), a
    message that says so and what to fix; None if it is away or something else."""
    user = settings.redis.username or "default"
    if isinstance(exc, AuthenticationError) or _says(exc, "NOAUTH", "WRONGPASS"):
        return (
            f"Redis at {settings.redis.where()} refused the credentials of user {user!r} ({exc}): "
            "check redis.username and redis.password / redis.password_file"
        )
    if isinstance(exc, NoPermissionError) or _says(exc, "NOPERM"):
        return (
            f"Redis user {user!r} lacks a permission the router needs ({exc}): its ACL must "
            f"allow the topology's keys ({', '.join(key_patterns(settings))}) and commands; "
            "`router acls plan` prints the rule"
        )
    return None


def _says(exc: BaseException, *codes: str) -> bool:
    return isinstance(exc, redis.RedisError) and str(exc).startswith(codes)


class RedisRefused(RouterError, RuntimeError):
    """Redis refused the router's credentials or ACL: retrying cannot help."""


def check_access(client: RedisClient, settings: RouterSettings) -> None:
    """Before a process starts work: raise RedisRefused if Redis refuses our user or its
    key patterns (one read of each table's cursor key). A Redis that does not answer is
    not refused: the process starts and backs off as usual."""
    prefix, name = settings.redis.key_prefix, settings.topology.name
    try:
        for c in cells.all_cells(settings):
            for side in SIDES:
                client.get(TableKeys.of(prefix, cells.tag(name, c), side).cursor)
    except redis.RedisError as exc:
        message = refused(exc, settings)
        if message is not None:
            raise RedisRefused(message) from exc
