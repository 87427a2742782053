"""The raw relay: the transfer unit's loop with pass-through steps (the benchmark's baseline).

Same consumer and transactional producer settings (batch size, linger, compression,
`read_committed`), the same poll loop, rebalance handling, back-off and graceful stop,
the same produce call (key, value, headers, timestamp) and the same transaction per batch
with the consumer offsets in it. What it does not do is decide anything: a message goes
to the destination its key hashes to (ordinary keyless ones round-robin by offset), as a
plain keyed Kafka pipeline would, with no Redis round trip, no header parsing and no
payload checks. Spreading over all destinations keeps the comparison honest: a
transaction's cost grows with the partitions it spans, and a unit's batches span them
all. It keeps no group together and guarantees nothing beyond exactly-once per hop; it
exists so that `make bench` can say what routing costs on top of the physical cost of a
Kafka hop in Python on this machine.

    router relay --side send      # send queues -> transfer topic, like a send unit
    router relay --side receive   # transfer topic -> receive queues, like a receive unit
"""

from __future__ import annotations

from dataclasses import replace
from zlib import crc32

from confluent_kafka import Message

from router.topology.side import SideSpec
from router.unit.steps.batch import TP, Batch, Item
from router.unit.steps.drain.step import Drain
from router.unit.steps.emit.records import Output, Record
from router.unit.steps.ownership import LaneClaims


def relay_spec(spec: SideSpec) -> SideSpec:
    """The relay's consumer group: never the units' own, whose partitions it would take."""
    return replace(spec, group_id=f"{spec.group_id}.raw-relay")


class RelaySteps:
    """Pass-through steps: every message forwarded where its key hashes to."""

    room: Drain | None = None  # no waiting room
    claims: LaneClaims | None = None  # no table

    def __init__(self, spec: SideSpec) -> None:
        self._targets = [spec.target(d) for d in spec.destinations]

    def decide(self, batch: Batch, messages: list[Message]) -> None:
        items = batch.items
        for m in messages:
            batch.track(m)
            items.append(Item(m, None, None))

    def emit(self, batch: Batch, now_ms: int) -> Output:
        targets = self._targets
        n = len(targets)
        out = Output()
        records = out.records
        for item in batch.items:
            m = item.m
            key = m.key()
            # Kafka's own way to spread keyed records (any stable hash would do), so that
            # a batch's transaction spans as many destinations as a unit's does.
            topic, partition = targets[(crc32(key) if key else m.offset()) % n]
            ts_type, ts = m.timestamp()
            records.append(
                Record(topic, partition, key, m.value(), m.headers(), ts if ts_type else 0, None)
            )
        out.forwarded = len(records)
        return out

    def release(self, batch: Batch, out: Output) -> None:
        """Nothing to release: the relay keeps no table."""

    def settle(self, batch: Batch, out: Output) -> None:
        """Nothing to settle: the relay keeps no table."""

    def assigned(self, tps: list[TP]) -> None:
        """Nothing to claim: the relay keeps no table."""

    def revoked(self, tps: list[TP]) -> None:
        """Nothing to claim: the relay keeps no table."""
