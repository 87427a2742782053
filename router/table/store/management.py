"""A management table in Redis: the rules of `router.table.routing`, applied atomically.

One table per side (send side: guarantee ID -> transfer partition; receive side:
guarantee ID -> receive queue), shared by every unit of that side. Every change is one
Lua script (`router/table/store/lua/*.lua`), so concurrent units never assign one group twice.
All keys of a table share one Redis Cluster hash slot: `<prefix>:{<topology>:<side>}:*`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Sequence
from typing import Any

from router.backends.redis.client import RedisClient
from router.errors import ConfigError
from router.table.routing import HELD, SKIPPED, Entry, Policy, RouteRequest, RouteResult, Swept
from router.table.store.codec import Side, TableKeys, decode_entry, encode, script
from router.table.store.codec import text as _text
from router.table.store.outboxes import OutboxTable
from router.table.store.owners import FENCED, LaneFenced, OwnersTable
from router.table.store.placement import SteerTable
from router.table.store.room import RoomTable
from router.table.store.settling import SettleTable
from router.table.store.writers import WRITER_IDLE_S, WritersTable

__all__ = ["CALL_REQUESTS", "CALL_WORK", "ManagementTable", "Side", "TableKeys"]

# Bounds on one route call's work (Redis runs one script at a time, for every unit): a
# batch larger than this is routed in several calls.
CALL_REQUESTS = 2_000
CALL_WORK = 20_000  # requests x destinations


class ManagementTable(SettleTable, RoomTable, SteerTable, WritersTable, OutboxTable, OwnersTable):
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

    # ------------------------------------------------------------------ routing

    def route(
        self,
        requests: Sequence[RouteRequest],
        now_ms: int | None = None,
        batch: str = "batch",
        carried: Sequence[tuple[str, str]] = (),
        earlier: Sequence[str] = (),
    ) -> RouteResult:
        """Decide a destination for every request of a batch: one round trip per chunk
        of `chunk_size` requests, so that no call blocks Redis for long. `carried`: finals
        (gid, token) the caller routed in its `earlier` batches, whose transactions commit
        before this batch's records are written: their groups, if not released yet, free
        their destinations for this batch as a final routed in it would (a new group of
        the final's lane may follow it there; `router.table.model`). A chunk carries the
        finals its batch routed in the chunks before it."""
        if "|" in batch:
            raise ValueError(f"a batch ID may not contain '|': {batch!r}")
        if not requests:
            return RouteResult([], 0, 0, 0)
        for r in requests:
            if r.targets and not set(r.targets) <= set(self.destinations):
                raise ValueError(f"multicast to unknown destinations: {r.targets}")
        size = self.chunk_size
        if len(requests) <= size:
            return self._route_chunk(requests, now_ms, batch, carried, earlier)
        carry = list(carried)
        dests = set(self.destinations)
        # A lane held in one chunk stays held for the rest of the batch.
        decisions: list[str] = []
        counts = [0] * 5
        held: set[str] = set()
        for start in range(0, len(requests), size):
            chunk = requests[start : start + size]
            sent = [r for r in chunk if r.lane not in held]
            result = (
                self._route_chunk(sent, now_ms, batch, carry, earlier)
                if sent
                else RouteResult([], 0, 0, 0)
            )
            got = iter(result.decisions)
            for r in chunk:
                d = next(got) if r.lane not in held else SKIPPED
                if d == HELD:
                    held.add(r.lane)
                elif r.final and r.guarantee_id is not None and d in dests:
                    carry.append((r.guarantee_id, r.token))
                decisions.append(d)
            res = result
            for i, n in enumerate((res.shared, res.held, res.created, res.stopped, res.orphans)):
                counts[i] += n
        return RouteResult(decisions, *counts)

    @property
    def chunk_size(self) -> int:
        """Requests per route call: at most CALL_REQUESTS, and at most CALL_WORK
        request x destination steps (choosing a destination looks at every one)."""
        return max(1, min(CALL_REQUESTS, CALL_WORK // len(self.destinations)))

    def _route_chunk(
        self,
        requests: Sequence[RouteRequest],
        now_ms: int | None,
        batch: str,
        carried: Sequence[tuple[str, str]] = (),
        earlier: Sequence[str] = (),
    ) -> RouteResult:
        args = self.head_args(batch, now_ms, carried, earlier, {r.lane for r in requests})
        encoded = [encode(r) for r in requests]
        for column in range(3):  # the script reads the messages' values in three columns
            args += [e[column] for e in encoded]
        out = self._route(keys=self._route_keys, args=args)
        if int(out[0]) == FENCED:
            raise LaneFenced(_text(out[1]))
        if int(out[6]):
            self.resets += 1
        self.epoch = _text(out[5])
        self.writes = int(out[7])  # this caller's own last write: what it checks next
        self._routed_at = time.monotonic()
        return RouteResult(
            [d.decode("utf-8") if isinstance(d, bytes) else d for d in out[8:]],  # per message
            int(out[0]),
            int(out[1]),
            int(out[2]),
            int(out[3]),
            int(out[4]),
        )

    def head_args(
        self,
        batch: str,
        now_ms: int | None = None,
        carried: Sequence[tuple[str, str]] = (),
        earlier: Sequence[str] = (),
        lanes: Iterable[str] = (),
    ) -> list[Any]:
        """The leading arguments of the route script; `encode` gives 3 per message.
        `lanes`: those the call speaks for, fenced by this caller's claims on them."""
        tail: list[Any] = [len(carried)]
        for gid, token in carried:
            tail += (gid, token)
        tail += (len(earlier), *earlier)
        tail += self.fences(lanes)
        return [
            "" if now_ms is None else now_ms,
            f"{self.policy}:{self.max_staged}:{self.homes}",
            batch,
            self.lease_ms,
            self.epoch,
            f"{self.seen_writes()}:{self.writer}",
            *self._dests,
            *tail,
        ]

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
