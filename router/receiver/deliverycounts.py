"""Where the receiver keeps failed-delivery counts: Redis, beside its group statuses.

One hash per consumer group and receive-queue partition (`router.receiver.redelivery_rules` names
its fields), in the receiving group's Redis Cluster slot:

    <prefix>:{receiver:<group.id>}:deliveries:<topic>:<partition>

Every write sets the key's TTL again (`count_ttl_s`, default 7 days): a partition's counts
go once nothing was abandoned on it for that long. A message delivered and committed
costs nothing here; an abandon is one round trip (the count, the TTL, and the removal
of fields of offsets the group has committed since); a dead letter one more. The
receiver loads a partition's hash once, the first time it reads from it after it was
assigned (one round trip for every partition assigned together).

`MemoryCounts` keeps the same in the process: the receiver's choice without `state`
(counts then start again when the receiver does).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from router.receiver.redelivery_rules import TP, count_field, dead_field, stop_field, stop_value
from router.state.store import State, client_of


def key_of(prefix: str, group_id: str, tp: TP) -> str:
    return f"{prefix}:{{receiver:{group_id}}}:deliveries:{tp[0]}:{tp[1]}"


class Counts(Protocol):
    def load(self, tps: Sequence[TP]) -> dict[TP, dict[str, str]]: ...

    def add(self, tp: TP, offset: int, stale: Iterable[str] = ()) -> int: ...

    def settle(
        self,
        tp: TP,
        dead: Sequence[int],
        stop: tuple[str, int, int] | None = None,
        unstop: str | None = None,
    ) -> None: ...


class DeliveryCounts:
    """A consumer group's counts in Redis (`state`: a URL or a `redis.Redis`)."""

    def __init__(self, state: State, group_id: str, prefix: str, ttl_s: float) -> None:
        self.client = client_of(state)
        self._r: Any = self.client  # redis-py types sync and async results as one union
        self.prefix, self.group_id = prefix, group_id
        self.ttl_ms = max(int(ttl_s * 1000), 1)

    def key(self, tp: TP) -> str:
        return key_of(self.prefix, self.group_id, tp)

    def load(self, tps: Sequence[TP]) -> dict[TP, dict[str, str]]:
        """Each partition's fields, in one round trip."""
        pipe = self._r.pipeline(transaction=False)
        for tp in tps:
            pipe.hgetall(self.key(tp))
        found: list[dict[bytes, bytes]] = pipe.execute() if tps else []
        return {
            tp: {k.decode(): v.decode() for k, v in raw.items()}
            for tp, raw in zip(tps, found, strict=True)
        }

    def add(self, tp: TP, offset: int, stale: Iterable[str] = ()) -> int:
        """One more failed delivery of the message at `offset`: its count now. Removes
        the `stale` fields in the same round trip."""
        key = self.key(tp)
        pipe = self._r.pipeline(transaction=True)
        pipe.hincrby(key, count_field(offset), 1)
        pipe.pexpire(key, self.ttl_ms)
        gone = list(stale)
        if gone:
            pipe.hdel(key, *gone)
        return int(pipe.execute()[0])

    def settle(
        self,
        tp: TP,
        dead: Sequence[int],
        stop: tuple[str, int, int] | None = None,
        unstop: str | None = None,
    ) -> None:
        """After dead letters were flushed, one round trip: the messages at `dead` are
        dead-lettered; `stop` (guarantee ID, stop offset, last offset dead-lettered): a
        stopped group and how far its members were dead-lettered; `unstop`: a stopped
        group whose final was dead-lettered is over."""
        key = self.key(tp)
        pipe = self._r.pipeline(transaction=True)
        if dead:
            pipe.hset(key, mapping={dead_field(o): "1" for o in dead})
        if stop is not None:
            gid, first, last = stop
            pipe.hset(key, stop_field(gid), stop_value(first, last))
        if unstop is not None:
            pipe.hdel(key, stop_field(unstop))
        pipe.pexpire(key, self.ttl_ms)
        pipe.execute()


class MemoryCounts:
    """The same, in this process only (a receiver without `state`)."""

    def __init__(self) -> None:
        self._parts: dict[TP, dict[str, str]] = {}

    def load(self, tps: Sequence[TP]) -> dict[TP, dict[str, str]]:
        return {tp: dict(self._parts.get(tp, {})) for tp in tps}

    def add(self, tp: TP, offset: int, stale: Iterable[str] = ()) -> int:
        part = self._parts.setdefault(tp, {})
        for name in stale:
            part.pop(name, None)
        count = int(part.get(count_field(offset), "0")) + 1
        part[count_field(offset)] = str(count)
        return count

    def settle(
        self,
        tp: TP,
        dead: Sequence[int],
        stop: tuple[str, int, int] | None = None,
        unstop: str | None = None,
    ) -> None:
        part = self._parts.setdefault(tp, {})
        part.update({dead_field(o): "1" for o in dead})
        if stop is not None:
            part[stop_field(stop[0])] = stop_value(stop[1], stop[2])
        if unstop is not None:
            part.pop(stop_field(unstop), None)
