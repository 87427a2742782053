"""What distinguishes the send side from the receive side: sources and destinations.

A *destination* is what a management table names. It is durable at the Kafka level, never
a process: on the send side a partition of the transfer topic (a "receive-side transfer
unit" of the patent), on the receive side a receive-queue topic. When the process serving
a transfer partition dies, the receive units' consumer group hands that partition to
another process, and every entry naming it stays valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.backends.redis.client import RedisClient
from router.config.settings import RouterSettings
from router.contract.priority import band_topics
from router.table.store.management import ManagementTable, Side, TableKeys
from router.topology import cells


@dataclass(frozen=True, slots=True)
class SideSpec:
    side: Side
    sources: tuple[str, ...]  # topics this side's units consume
    group_id: str  # their consumer group
    destinations: tuple[str, ...]  # names in this side's table
    transfer_topic: str  # send side: where destinations live

    def target(self, dest: str) -> tuple[str, int]:
        """The Kafka topic and partition a destination name stands for."""
        if self.side == "send":
            return self.transfer_topic, int(dest)
        return dest, 0


def side_spec(settings: RouterSettings, side: Side, cell: int | None = None) -> SideSpec:
    """One side of the topology: its destinations are every one of the side, or those of
    `cell` (`router.topology.cells`; with one cell, the same)."""
    t, n = settings.topology, settings.priority.bands
    if side == "send":  # every band's topic of each source (router.contract.priority)
        return SideSpec(
            "send",
            tuple(b for q in t.send_queues for b in band_topics(q, n)),
            t.send_group,
            cells.destinations(settings, "send", cell),
            t.transfer_topic,
        )
    return SideSpec(
        "receive",
        tuple(band_topics(t.transfer_topic, n)),
        t.receive_group,
        cells.destinations(settings, "receive", cell),
        t.transfer_topic,
    )


def table_for(
    settings: RouterSettings, side: Side, client: RedisClient, cell: int = 0
) -> ManagementTable:
    """The management table of one side (of one cell: `router.topology.cells`), as every
    unit and tool of that side sees it."""
    spec = side_spec(settings, side, cell)
    keys = TableKeys.of(settings.redis.key_prefix, cells.tag(settings.topology.name, cell), side)
    # An in-flight lease outlives any transaction the batch could still commit.
    lease = settings.kafka.transaction_timeout_ms + 5_000
    routing = settings.routing
    return ManagementTable(
        client,
        keys,
        spec.destinations,
        routing.busy_policy,
        lease,
        routing.max_staged_messages,
        writer_idle_s=settings.sweeper.writer_idle_s,
        homes=homes(settings, side, cell),
        remember=routing.remember_groups,
    )


def homes(settings: RouterSettings, side: Side, cell: int = 0) -> int:
    """Lanes' home destinations (`router.table.choice.home`) for one side's table: on (the
    cell count, which the home rule divides partition numbers by) under policy `wait` when
    the cell has at least as many source partitions as destinations, so that every
    destination is some lane's home; 0 (off) otherwise. With fewer lanes than destinations,
    homes would leave destinations without ordinary traffic; by the cursor alone, lanes
    spread over them all. `routing.lane_homes` false: always 0."""
    if settings.routing.busy_policy != "wait" or not settings.routing.lane_homes:
        return 0
    lanes = len(cells.source_partitions(settings, side, cell))
    ndest = len(cells.destinations(settings, side, cell))
    return settings.topology.cells if lanes >= ndest else 0
