"""The management tables' gauges for a process's metrics endpoint (`router.metrics.exporter`):
open groups per destination, and the waiting room's size and oldest wait per side,
refreshed once an interval."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import redis

from router.metrics.exporter import Refresh
from router.metrics.prom import Gauges
from router.metrics.registry import GaugeName, Metrics
from router.table.store.management import ManagementTable, Side

log = logging.getLogger("router.exporter")

TABLE_GAUGES: tuple[GaugeName, ...] = ("open_groups", "room_waiting", "room_oldest_wait_seconds")


def room_levels(count: int, oldest_ms: int | None, now_ms: int) -> tuple[float, float]:
    """(groups waiting, seconds the oldest has waited: 0 if none waits)."""
    return float(count), 0.0 if oldest_ms is None else max(0.0, (now_ms - oldest_ms) / 1000)


def open_groups(
    tables: Mapping[Side, ManagementTable] | Sequence[tuple[Side, ManagementTable]],
    metrics: Metrics,
) -> Refresh:
    """Refreshes the open groups per destination of `tables` (every destination, 0 too)
    and each side's room gauges (one more round trip per table); not while Redis does not
    answer (the loop would wait for it twice an interval). Several tables of one side (its
    cells: `router.topology.cells`) add up: their destinations are disjoint, their rooms'
    waiting groups are summed and the oldest wait is the oldest of any."""
    pairs = list(tables.items()) if isinstance(tables, Mapping) else list(tables)

    def refresh(gauges: Gauges, redis_answers: bool) -> None:
        if not redis_answers:
            for name in TABLE_GAUGES:
                gauges.values.pop(name, None)
            return
        values: dict[tuple[str, ...], float] = {}
        waiting: dict[tuple[str, ...], float] = {}
        oldest: dict[tuple[str, ...], float] = {}
        for side, table in pairs:
            try:
                loads = table.loads()
                count, age = room_levels(*table.room_size())
                waiting[(side,)] = waiting.get((side,), 0.0) + count
                oldest[(side,)] = max(oldest.get((side,), 0.0), age)
            except redis.RedisError as exc:
                metrics.inc("redis_errors")
                log.debug("no gauges of the %s table this interval: %s", side, exc)
                continue
            for dest in table.destinations:
                values[(side, dest)] = float(loads.get(dest, 0))
        gauges.values["open_groups"] = values
        gauges.values["room_waiting"] = waiting
        gauges.values["room_oldest_wait_seconds"] = oldest

    return refresh
