"""A management table in Redis: the rules of `router.table.routing`, applied atomically.

One table per side (send side: guarantee ID -> transfer partition; receive side:
guarantee ID -> receive queue), shared by every unit of that side. Every change is one
Lua script (`router/table/store/lua/*.lua`), so concurrent units never assign one group twice.
All keys of a table share one Redis Cluster hash slot: `<prefix>:{<topology>:<side>}:*`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from typing import Any

from router.backends.redis.client import RedisClient
from router.errors import ConfigError
from router.table.routing import Entry, Policy, Swept
from router.table.store.codec import Side, TableKeys, decode_entry, script
from router.table.store.codec import text as _text
from router.table.store.memory import GroupMemory
from router.table.store.outboxes import OutboxTable
from router.table.store.owners import OwnersTable
from router.table.store.placement import SteerTable
from router.table.store.room import RoomTable
from router.table.store.routecalls import CALL_REQUESTS, CALL_WORK, RouteCalls
from router.table.store.settling import SettleTable
from router.table.store.writers import WRITER_IDLE_S, WritersTable

__all__ = ["CALL_REQUESTS", "CALL_WORK", "ManagementTable", "Side", "TableKeys"]


class ManagementTable(
    RouteCalls, SettleTable, RoomTable, SteerTable, WritersTable, OutboxTable, OwnersTable
):
    """The Redis-backed table of one side. Every method is one round trip."""

    def __init__(
        self,
        client: RedisClient,
        keys: TableKeys,
        destinations: Sequence[str],
        policy: Policy = "share",
        lease_ms: int = 15_000,
        max_staged: int = 10_000,
        writer_idle_s: int = WRITER_IDLE_S,
        homes: int = 0,
        remember: bool = True,
    ) -> None:
        if not destinations:
            raise ConfigError("a management table needs at least one destination")
        if any(not d or d.startswith("!") or "|" in d for d in destinations):
            raise ConfigError(f"invalid destination names: {list(destinations)}")
        self.client = client
        # redis-py types sync and async results as one union; this client is synchronous.
        self._r: Any = client
        self.keys = keys
        self.destinations = list(destinations)
        self.policy: Policy = policy
        self.lease_ms = lease_ms
        self.max_staged = max_staged
        self.homes = homes  # lanes' home destinations: 0 off (router.table.choice.home)
        self.writer_idle_s = writer_idle_s
        # the plain members of this caller's groups decided without Redis, on lanes it
        # claimed (router.table.store.memory); None: every message sent
        self.memory = GroupMemory() if remember else None
        self._route = self._r.register_script(script("route"))
        self._settle = self._r.register_script(script("settle"))
        self._sweep = self._r.register_script(script("sweep"))
        self._route_keys = keys.named(
            "entries deadlines load cursor closing stats inflight epoch writes room parks"
            " admitted writers done draining owners"
        )
        # The table's epoch and write count as last seen: a different epoch, or fewer
        # writes, means the table was lost (wholly or partly).
        self.epoch = ""
        self.writes: int | None = None
        self.writer = secrets.token_hex(6)  # this caller, in the table's writers hash
        self._routed_at: float | None = None
        self.resets = 0
        self.last_fenced: str | None = None  # (router.table.store.settling)
        self._settle_keys = keys.named(
            "entries deadlines load closing stats inflight cursor room parks admitted done"
            " done_at draining owners"
        )
        self._dests: list[str | int] = [len(self.destinations), *self.destinations]

    def sweep(
        self, limit: int, now_ms: int | None = None, horizon_ms: int | None = None
    ) -> list[Swept]:
        """Remove up to `limit` entries whose deadline (update time + TTL) is before both
        now and `horizon_ms` (None: no horizon, as the pure model's `sweep`); each also
        goes to the outbox. The sweeper always passes the side's horizon
        (`router.sweeper.horizon`): it never sweeps from Redis alone."""
        k = self.keys
        out = self._sweep(
            keys=[
                k.entries,
                k.deadlines,
                k.load,
                k.closing,
                k.outbox,
                k.stats,
                k.cursor,
                k.inflight,
                k.room,
                k.parks,
                k.admitted,
                k.done,
                k.done_at,
                k.draining,
            ],
            args=[
                "" if now_ms is None else now_ms,
                limit,
                "" if horizon_ms is None else horizon_ms,
                *self._dests,
            ],
        )
        now = int(out[0])
        return [Swept(_text(out[i]), decode_entry(out[i + 1]), now) for i in range(1, len(out), 2)]

    # ------------------------------------------------------------------ reading

    def closing_since(self, older_than_ms: int) -> list[tuple[str, str]]:
        """(gid, token) of entries marked closing at or before `older_than_ms`."""
        gids = [_text(g) for g in self._r.zrangebyscore(self.keys.closing, "-inf", older_than_ms)]
        if not gids:
            return []
        raws = self._r.hmget(self.keys.entries, gids)
        return [
            (gid, decode_entry(raw).closing)
            for gid, raw in zip(gids, raws, strict=True)
            if raw is not None and decode_entry(raw).closing
        ]

    def entries(self) -> dict[str, Entry]:
        return {_text(g): decode_entry(v) for g, v in self._r.hgetall(self.keys.entries).items()}

    def entry(self, gid: str) -> Entry | None:
        raw = self._r.hget(self.keys.entries, gid)
        return None if raw is None else decode_entry(raw)

    def loads(self) -> dict[str, int]:
        return {_text(d): int(n) for d, n in self._r.hgetall(self.keys.load).items()}

    def cursor(self) -> int:
        raw = self._r.get(self.keys.cursor)
        return 0 if raw is None else int(raw)

    def stats(self) -> dict[str, int]:
        return {_text(k): int(v) for k, v in self._r.hgetall(self.keys.stats).items()}

    def drop(self) -> None:
        """Delete the whole table (the drivers between runs; tests). Operators have no command
        for this: `router table release`, `evict` and `drain` act on one group or destination."""
        self._r.delete(*self.keys.all())

    def renew(self, batch: str, dests: Iterable[str], parked: bool = False) -> bool:
        """Extend a batch's in-flight leases on `dests`, and its park leases if it `parked`
        messages in the waiting room, to now + lease_ms (Redis clock), all or none: False if
        one is gone (expired and removed; `router/table/store/lua/lease.lua`)."""
        lease = self.__dict__.get("_lease")
        if lease is None:  # registered on first use: renewals are rare
            lease = self.__dict__["_lease"] = self.client.register_script(script("lease"))
        keys = [self.keys.inflight, self.keys.parks]
        return bool(lease(keys=keys, args=[batch, self.lease_ms, int(parked), *dests]))
