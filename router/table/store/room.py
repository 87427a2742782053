"""The waiting room's part of a management table (`router.table.room`): reads for the drain
step, tests and operators, and the sweeper's end of long waits. Mixed into
`router.table.store.management.ManagementTable`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.cluster import RedisCluster

from router.backends.redis.cluster import node_options
from router.table.routing import RoomState
from router.table.store.codec import TableKeys, decode_entry, script
from router.table.store.codec import text as _text
from router.table.store.owners import FENCED, LaneFenced, OwnersTable


class RoomTable(OwnersTable):
    keys: TableKeys
    client: Any
    _r: Any
    _dests: list[str | int]

    def now_ms(self) -> int:
        """The Redis server clock, which the scripts use (on a cluster: the table's node)."""
        seconds, micros = self._r.time(**node_options(self.client, self.keys.entries))
        return int(seconds) * 1000 + int(micros) // 1000

    def room_timeout(
        self, max_wait_ms: int, policy: str, now_ms: int | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        """End the wait of groups waiting `max_wait_ms` or longer (`router.table.waits.time_out`):
        (now on the Redis clock, [(gid, destination, '!stop' or '!w': reported, still
        waiting)])."""
        timeout = self.__dict__.get("_room_timeout")
        if timeout is None:  # registered on first use: only the sweeper calls it
            timeout = self.__dict__["_room_timeout"] = self.client.register_script(
                script("room_timeout")
            )
        k = self.keys
        out = timeout(
            keys=[
                *(k.entries, k.load, k.cursor, k.room, k.parks, k.admitted, k.stats),
                *(k.deadlines, k.draining, k.waited, k.waits_out),
            ],
            args=["" if now_ms is None else now_ms, max_wait_ms, policy, *self._dests],
        )
        return int(out[0]), [(_text(out[i]), _text(out[i + 1])) for i in range(1, len(out), 2)]

    def expire_leases(self, now_ms: int | None = None) -> tuple[int, int]:
        """End the in-flight and park leases that expired (Redis clock unless `now_ms`)
        and admit waiting groups to the destinations that became clean, as a route call
        would (`router.table.room.expire`): (leases ended, groups admitted). The sweeper's
        round, so that leases of batches that never settle end where nothing is routed."""
        expire = self.__dict__.get("_expire")
        if expire is None:  # registered on first use: only the sweeper (and tests) call it
            expire = self.__dict__["_expire"] = self.client.register_script(script("expire"))
        k = self.keys
        ended, admitted = expire(
            keys=[k.inflight, k.parks, k.room, k.entries, k.load, k.cursor, k.admitted, k.draining],
            args=["" if now_ms is None else now_ms, *self._dests],
        )
        return int(ended), int(admitted)

    def room_state(self, gids: Sequence[str]) -> dict[str, RoomState]:
        """The entries of `gids` that exist, as the drain step needs them (one round
        trip): state, destination, closing mark, park count, park lease in flight."""
        if not gids:
            return {}
        pipe = self._r.pipeline(transaction=False)
        pipe.hmget(self.keys.entries, list(gids))
        pipe.zrange(self.keys.parks, 0, -1)
        raws, parks = pipe.execute()
        leased = {_text(m).split("|", 1)[1] for m in parks}
        out = {}
        for gid, raw in zip(gids, raws, strict=True):
            if raw is not None:
                e = decode_entry(raw)
                out[gid] = RoomState(
                    e.state, e.dest, e.closing, e.parks, gid in leased, e.next, e.fence, e.origin
                )
        return out

    def chain(
        self,
        plan: Sequence[tuple[str, Sequence[str], Sequence[tuple[str, int, str]]]],
        lanes: Iterable[str] = (),
    ) -> dict[str, list[str]]:
        """Admit complete waiting groups behind the admitted groups a drain batch forwards
        whole (`router.table.chain`): plan is [(destination, heads, [(gid, parks held,
        final's token)])]; returns destination -> the groups admitted to it, in order.
        `lanes`: the room partitions drained, fenced by this caller's claims
        (`router.table.store.owners`; raises LaneFenced, nothing changed)."""
        if not plan:
            return {}
        run = self.__dict__.get("_chain")
        if run is None:  # registered on first use: only units with a waiting room call it
            run = self.__dict__["_chain"] = self.client.register_script(script("chain"))
        args: list[str | int] = [*self.fences(lanes), len(plan)]
        for dest, heads, candidates in plan:
            args += (dest, len(heads), *heads, len(candidates))
            for gid, parks, final in candidates:
                args += (gid, parks, final)
        args += self._dests
        k = self.keys
        out = run(
            keys=[k.entries, k.load, k.room, k.admitted, k.parks, k.inflight, k.draining, k.owners],
            args=args,
        )
        if out and not isinstance(out[0], list) and int(out[0]) == FENCED:
            raise LaneFenced(_text(out[1]))
        return {_text(row[0]): [_text(g) for g in row[1:]] for row in out}

    def admitted(self) -> dict[str, str]:
        """Admitted groups -> their reserved destination, until drained."""
        return {_text(g): _text(d) for g, d in self._r.hgetall(self.keys.admitted).items()}

    def room(self) -> dict[str, int]:
        """Waiting groups -> wait start (ms), oldest first (`router.table.room`)."""
        return {_text(g): int(t) for g, t in self._r.zrange(self.keys.room, 0, -1, withscores=True)}

    def room_size(self) -> tuple[int, int | None, int]:
        """(groups waiting, the oldest one's wait start or None, now), both on the Redis
        clock, in one round trip: the room's gauges (two on a cluster, whose pipelines
        refuse TIME: `now_ms` asks the table's node)."""
        cluster = isinstance(self.client, RedisCluster)
        pipe = self._r.pipeline(transaction=False)
        pipe.zcard(self.keys.room)
        pipe.zrange(self.keys.room, 0, 0, withscores=True)
        if not cluster:
            pipe.time()
        count, oldest, *clock = pipe.execute()
        if cluster:
            now = self.now_ms()
        else:
            sec, usec = clock[0]
            now = int(sec) * 1000 + int(usec) // 1000
        return int(count), (int(oldest[0][1]) if oldest else None), now

    def park_leases(self) -> dict[tuple[str, str], int]:
        """(group, batch) -> expiry of park leases of batches not yet settled."""
        out = {}
        for member, score in self._r.zrange(self.keys.parks, 0, -1, withscores=True):
            batch, gid = _text(member).split("|", 1)
            out[(gid, batch)] = int(score)
        return out
