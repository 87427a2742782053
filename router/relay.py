"""The raw relay: a transfer unit with the routing taken out (the benchmark's baseline).

It is the same class as a unit, minus the management table: the same consumer and
transactional producer settings (batch size, linger, compression, `read_committed`),
the same poll loop, rebalance handling, back-off and graceful stop, the same produce
call (key, value, headers, timestamp) and the same transaction per batch with the
consumer offsets in it. What it does not do is decide anything: a message goes to the
destination its key hashes to (ordinary keyless ones round-robin by offset), as a plain
keyed Kafka pipeline would, with no Redis round trip, no header parsing and no payload
checks. Spreading over all destinations keeps the comparison honest: a transaction's cost
grows with the partitions it spans, and a unit's batches span them all. It keeps no
group together and guarantees nothing beyond exactly-once per hop; it exists so that
`make bench` can say what routing costs on top of the physical cost of a Kafka hop in
Python on this machine.

    router relay --side send      # send queues -> transfer topic, like a send unit
    router relay --side receive   # transfer topic -> receive queues, like a receive unit
"""

from __future__ import annotations

from dataclasses import replace
from zlib import crc32

import redis
from confluent_kafka import Message

from router.config import RouterSettings
from router.faults import Faults
from router.side import SideSpec
from router.unit import TransferUnit, _Batch, _Decided, _Item


def relay_spec(spec: SideSpec) -> SideSpec:
    """The relay's consumer group: never the units' own, whose partitions it would take."""
    return replace(spec, group_id=f"{spec.group_id}.raw-relay")


class RawRelay(TransferUnit):
    kind = "relay"

    def __init__(
        self,
        settings: RouterSettings,
        spec: SideSpec,
        *,
        redis_client: redis.Redis | None = None,
        faults: Faults | None = None,
    ) -> None:
        super().__init__(settings, relay_spec(spec), redis_client=redis_client, faults=faults)
        self._targets = [spec.target(d) for d in spec.destinations]

    def _decide(self, messages: list[Message]) -> _Decided:
        batch = _Batch()
        for m in messages:
            batch.track(m)
            batch.items.append(_Item(m, None, None))
        self._batches += 1
        return _Decided(batch, f"{self.instance}:{self._batches}", {}, {}, None, 0.0)

    def _produce_items(
        self, decided: _Decided
    ) -> tuple[set[str], list[tuple[str, str]], int, int, int, int]:
        targets = self._targets
        n = len(targets)
        for item in decided.batch.items:
            m = item.m
            key = m.key()
            # Kafka's own way to spread keyed records (any stable hash would do), so that
            # a batch's transaction spans as many destinations as a unit's does.
            topic, partition = targets[(crc32(key) if key else m.offset()) % n]
            self._produce_forward(topic, partition, m, m.headers())
        return set(), [], len(decided.batch.items), 0, 0, 0
