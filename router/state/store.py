"""Where the client libraries keep their state: Redis, beside the management tables.

Chosen over a compacted topic because the state is read and written by key (one group's
record), must be fenced (a restarted sender takes its ID over, and the old one's writes
then fail), and the router's tables already live in Redis with the persistence they need
(see docs/how-to/monitoring.md). Keys, each set in one Redis Cluster hash slot:

* `<prefix>:{sender:<sender_id>}:owner` — the token of the sender process now using the ID;
* `<prefix>:{sender:<sender_id>}:groups` — hash: guarantee ID -> `GroupRecord` (JSON);
* `<prefix>:{receiver:<group.id>}:groups` — hash: guarantee ID -> `GroupStatus` (JSON);
* `<prefix>:{receiver:<group.id>}:done_at` — zset: finished group -> finish time (ms), so
  that finished groups' statuses are pruned after `retention_s`.
* `<prefix>:{receiver:<group.id>}:deliveries:<topic>:<partition>` — hash: delivery counts
  of abandoned messages (`router.receiver.deliverycounts`).

`<prefix>` is the router's `redis.key_prefix` (`router`). Sender writes go through one
Lua script (`router/state/lua/sender_state.lua`) that checks the owner token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict
from importlib import resources
from typing import Any

import redis

from router.backends.redis.client import RedisClient, redis_client
from router.backends.redis.cluster import RouterCluster
from router.config.servers import RedisSettings
from router.errors import ConfigError, RouterError
from router.state.groups import GroupStatus, advance
from router.state.groups import expired as expired_status
from router.state.sender import GroupRecord
from router.utils.clock import Every

State = str | RedisSettings | RedisClient


class SenderFenced(RouterError, RuntimeError):
    """Another sender took this sender ID over: this one may not send its groups on."""


def client_of(state: State) -> RedisClient:
    """A Redis client from a URL (`redis://host:port/db`, no credentials in it), from
    settings (an ACL user, TLS, Sentinel: `router.config.RedisSettings`), or the client
    itself; built as every Redis client of the router is (`router.backends.redis.client`)."""
    if isinstance(state, redis.Redis | RouterCluster):
        return state
    return redis_client(state if isinstance(state, RedisSettings) else RedisSettings(url=state))


class SenderStore:
    """The open groups of sender `sender_id`, and its ownership."""

    def __init__(self, state: State, sender_id: str, prefix: str = "router") -> None:
        if not sender_id or "}" in sender_id or "{" in sender_id:
            raise ConfigError(f"invalid sender ID {sender_id!r}")
        self.client = client_of(state)
        self._r: Any = self.client  # redis-py types sync and async results as one union
        base = f"{prefix}:{{sender:{sender_id}}}"
        self.owner_key, self.groups_key = f"{base}:owner", f"{base}:groups"
        lua = resources.files("router.state").joinpath("lua", "sender_state.lua").read_text("utf-8")
        self._script = self._r.register_script(lua)
        self.token = ""

    def take_over(self, token: str) -> None:
        """Become the ID's owner: an older sender's later writes fail (SenderFenced)."""
        self._r.set(self.owner_key, token)
        self.token = token

    def load(self) -> dict[str, GroupRecord]:
        """The recorded open groups."""
        raw: dict[bytes, bytes] = self._r.hgetall(self.groups_key)
        return {k.decode(): GroupRecord.decode(k.decode(), v) for k, v in raw.items()}

    def _call(self, op: str, pairs: Iterable[tuple[str, str]]) -> int:
        args = [a for pair in pairs for a in pair]
        if not args:
            return 0
        try:
            return int(
                self._script(keys=[self.owner_key, self.groups_key], args=[self.token, op, *args])
            )
        except redis.ResponseError as exc:
            if "FENCED" in str(exc):
                raise SenderFenced(str(exc)) from None
            raise

    def put(self, records: Iterable[GroupRecord]) -> None:
        """Write records as they are (a group opened or resumed)."""
        self._call("put", ((r.gid, r.encode()) for r in records))

    def update(self, records: Iterable[GroupRecord]) -> None:
        """Write checkpoints, each only over the same opening of its group."""
        self._call("update", ((r.gid, r.encode()) for r in records))

    def remove(self, finished: Iterable[tuple[str, str]]) -> None:
        """Remove (guarantee ID, token) records: finished or abandoned groups."""
        self._call("del", finished)


class StatusStore:
    """Per consumer group, each group's processing status (`router.state.groups`)."""

    def __init__(
        self, state: State, group_id: str, prefix: str = "router", retention_s: float = 86_400
    ) -> None:
        self.client = client_of(state)
        self._r: Any = self.client
        base = f"{prefix}:{{receiver:{group_id}}}"
        self.groups_key, self.done_key = f"{base}:groups", f"{base}:done_at"
        self.retention_ms = int(retention_s * 1000)
        self._prune = Every(60.0)

    def get(self, gid: str) -> GroupStatus | None:
        """Group `gid`'s status, if one was recorded."""
        raw = self._r.hget(self.groups_key, gid)
        return None if raw is None else GroupStatus(gid=gid, **json.loads(raw))

    def all(self) -> dict[str, GroupStatus]:
        """Every recorded group's status."""
        raw: dict[bytes, bytes] = self._r.hgetall(self.groups_key)
        return {k.decode(): GroupStatus(gid=k.decode(), **json.loads(v)) for k, v in raw.items()}

    def record(self, members: Iterable[Any]) -> None:
        """Members (`router.receiver.received.Received`) marked done, in order: their groups'
        statuses advanced (`router.state.groups.advance`) and written, in two round trips.
        Ordinary messages are left out."""
        grouped = [m for m in members if m.guarantee_id is not None]
        if not grouped:
            return
        gids = list(dict.fromkeys(m.guarantee_id for m in grouped))
        raw = self._r.hmget(self.groups_key, gids)
        now: dict[str, GroupStatus | None] = {
            g: None if v is None else GroupStatus(gid=g, **json.loads(v))
            for g, v in zip(gids, raw, strict=True)
        }
        changed: dict[str, GroupStatus] = {}
        for m in grouped:
            g = m.guarantee_id
            new = advance(now[g], g, m.topic, m.partition, m.offset, m.seq, m.final)
            if new is not None:
                now[g] = changed[g] = new
        if changed:
            self.write(changed.values())
        if self._prune.due():
            self.prune()

    def expired(self, m: Any, stopped: bool) -> None:
        """Member `m` (`router.receiver.received.Received`) found expired, not handed out: its
        group's status moves past it (`router.state.groups.expired`)."""
        g = m.guarantee_id
        if g is None:
            return
        new = expired_status(
            self.get(g), g, m.topic, m.partition, m.offset, m.seq, m.final, stopped
        )
        if new is not None:
            self.write([new])

    def write(self, statuses: Iterable[GroupStatus]) -> None:
        """One round trip: the statuses, and finished groups' times; prunes what finished
        more than `retention_s` ago."""
        now = int(time.time() * 1000)
        pipe = self._r.pipeline(transaction=True)
        for s in statuses:
            doc = asdict(s)
            del doc["gid"]
            pipe.hset(self.groups_key, s.gid, json.dumps(doc, separators=(",", ":")))
            if s.finished:
                pipe.zadd(self.done_key, {s.gid: now})
            else:
                pipe.zrem(self.done_key, s.gid)
        pipe.execute()

    def prune(self) -> int:
        """Forget finished groups older than the retention; the number forgotten."""
        old = self._r.zrangebyscore(self.done_key, 0, int(time.time() * 1000) - self.retention_ms)
        if old:
            pipe = self._r.pipeline(transaction=True)
            pipe.hdel(self.groups_key, *old)
            pipe.zrem(self.done_key, *old)
            pipe.execute()
        return len(old)


def find_group(
    state: State, gid: str, prefix: str = "router"
) -> tuple[dict[str, GroupRecord], dict[str, GroupStatus]]:
    """Group `gid` in every sender's open groups (by sender ID) and every receiving
    consumer group's statuses (by `group.id`): `router table show`. SCANs the keys."""
    r: Any = client_of(state)
    senders: dict[str, GroupRecord] = {}
    receivers: dict[str, GroupStatus] = {}
    for kind in ("sender", "receiver"):
        head = f"{prefix}:{{{kind}:"
        for key in r.scan_iter(match=f"{head}*}}:groups", count=1000):
            name = key.decode()[len(head) : -len("}:groups")]
            raw = r.hget(key, gid)
            if raw is None:
                continue
            if kind == "sender":
                senders[name] = GroupRecord.decode(gid, raw)
            else:
                receivers[name] = GroupStatus(gid=gid, **json.loads(raw))
    return senders, receivers
