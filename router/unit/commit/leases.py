"""A batch's in-flight leases, kept for as long as its records can still be appended.

The route step leases every destination a batch sends ordinary messages to ("dest|batch"
in the table's inflight zset, expiring `lease_ms` after routing;
`router/table/store/lua/route.lua`). While a lease lives, a new group takes that destination only as
a busy one, so a group's first message is never appended before those ordinary messages. The settle
step ends the leases after the commit. But a batch can be produced long after it was routed (with
the commit overlap it waits for the previous commit) and its commit retries. The same holds
for the park leases of a batch that parks messages in the waiting room ("batch|gid" in the
parks zset): while one lives, the drain step does not open (or release) the group, whose
parked record may not be on the broker yet. So:

* Before its transaction produces, and again before it commits, a batch past half its
  lease renews it (one Lua call, `router/table/store/lua/lease.lua`), all or none: if a lease is
  gone (expired and removed by another unit's route call, which may since have opened a group
  there), the batch is not produced: its transaction fails and it is rewound, and its replay is
  routed afresh.
* Its commit first gets every record onto the broker before the lease ends (`append_by`
  for `TransactionalSession.commit`), or fails. See `router.unit.commit.session`.

A batch well inside its lease (the common case) costs no round trip. The unit's deadline
is taken from its own clock before the table call, less a margin, so it ends before the
lease does on the Redis clock.

Known window: a park lease renewed before the commit still ends `lease_ms` later, while an
appended record of a room partition is read only once its transaction commits. A commit
that takes longer than that (its retries through a broker restart) lets the drain open the
group first; the drain then dead-letters the late record with its reason (`room-late`, or
`group-entry-missing` for a released group), never drops it.
"""

from __future__ import annotations

import time
from collections.abc import Collection

import redis
from confluent_kafka import KafkaError, KafkaException, Producer

from router.errors import RouterError
from router.metrics.registry import Metrics
from router.table.store.management import ManagementTable
from router.unit.steps.batch import Batch
from router.unit.steps.cells import shares

MARGIN_S = 2.0  # at most; a quarter of the lease if that is shorter


class LeaseLost(RouterError):
    """The batch's leases lapsed (or Redis cannot say): it must not be produced."""


class Leases:
    def __init__(self, table: ManagementTable, metrics: Metrics) -> None:
        self.table = table
        self.metrics = metrics
        self.lease_s = table.lease_ms / 1000
        self.margin_s = min(MARGIN_S, self.lease_s / 4)

    def keep(self, batch: Batch, dests: Collection[str], parked: bool = False) -> float | None:
        """When (time.monotonic()) the batch's records must be on the broker by; None if
        it holds no lease (no ordinary message to a destination, nothing `parked` in the
        waiting room). Renews the leases first if fewer than half remain; raises LeaseLost
        if that fails."""
        if not (dests or parked) or batch.routed_at is None:
            return None
        now = time.monotonic()
        until = batch.lease_until
        if until is None:
            until = batch.lease_until = batch.routed_at + self.lease_s - self.margin_s
        if until - now > self.lease_s / 2:
            return until
        metrics = self.metrics
        try:
            renewed = self.renew(batch, dests, parked)
        except redis.RedisError as exc:
            metrics.inc("redis_errors")
            raise LeaseLost(
                f"Redis unavailable, batch {batch.id}'s leases not renewed: {exc}"
            ) from exc
        metrics.inc("redis_round_trips")
        if not renewed:
            raise LeaseLost(
                f"batch {batch.id}'s leases lapsed before it was produced: rewound, to be "
                "routed again"
            )
        until = batch.lease_until = now + self.lease_s - self.margin_s
        return until

    def renew(self, batch: Batch, dests: Collection[str], parked: bool) -> bool:
        return self.table.renew(batch.id, dests, parked)


class CellLeases(Leases):
    """A batch's leases over several cells (`router.unit.steps.cells`): each cell's share
    renews its own on its own cell's table; the batch keeps them only if every cell did."""

    def __init__(self, tables: list[ManagementTable], metrics: Metrics) -> None:
        super().__init__(tables[0], metrics)
        self.tables = tables

    def renew(self, batch: Batch, dests: Collection[str], parked: bool) -> bool:
        return all(
            table.renew(batch.id, o.ordinary_dests, o.parked_in_room > 0)
            for table, (_, o) in zip(self.tables, shares(batch), strict=False)
            if o.ordinary_dests or o.parked_in_room
        )


def leases_of(tables: list[ManagementTable], metrics: Metrics) -> Leases:
    """A unit's leases on its one table, or on each of its cells' tables."""
    return CellLeases(tables, metrics) if len(tables) > 1 else Leases(tables[0], metrics)


def appended_by(producer: Producer, deadline: float) -> None:
    """Every record of the open transaction on the broker before `deadline` (monotonic),
    or an abortable KafkaException (the transaction is aborted: its records are never
    read, the batch is replayed). Flush returns once the broker acknowledged them all.

    Once appended, the records' place on each partition is fixed: a read_committed
    reader sees records in append order, and the last stable offset holds back anything
    appended after them until their transaction ends. So the commit and its retries may
    outlast the leases; appending may not."""
    left = deadline - time.monotonic()
    if left <= 0 or producer.flush(left) > 0 or time.monotonic() >= deadline:
        raise KafkaException(
            KafkaError(
                KafkaError._TIMED_OUT, "the batch's leases ended before its records were appended"
            )
        )
