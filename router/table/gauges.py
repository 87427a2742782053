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
    tables: Mapping[Side, ManagementTable] | Sequence[tuple[Side, int, ManagementTable]],
    metrics: Metrics,
) -> Refresh:
    """Refreshes the open groups per destination of `tables` (every destination, 0 too)
    and each side's room gauges (one more round trip per table); not while Redis does not
    answer (the loop would wait for it twice an interval). Each is labelled with its table's
    side and cell (`router.topology.cells`; a mapping of side -> table: cell 0)."""
    if isinstance(tables, Mapping):
        triples = [(side, 0, table) for side, table in tables.items()]
    else:
        triples = list(tables)

    def refresh(gauges: Gauges, redis_answers: bool) -> None:
        if not redis_answers:
            for name in TABLE_GAUGES:
                gauges.values.pop(name, None)
            return
        values: dict[tuple[str, ...], float] = {}
        waiting: dict[tuple[str, ...], float] = {}
        oldest: dict[tuple[str, ...], float] = {}
        for side, cell, table in triples:
            try:
                loads = table.loads()
                count, age = room_levels(*table.room_size())
            except redis.RedisError as exc:
                metrics.inc("redis_errors")
                log.debug("no gauges of the %s table of cell %d this interval: %s", side, cell, exc)
                continue
            waiting[(side, str(cell))] = count
            oldest[(side, str(cell))] = age
            for dest in table.destinations:
                values[(side, str(cell), dest)] = float(loads.get(dest, 0))
        gauges.values["open_groups"] = values
        gauges.values["room_waiting"] = waiting
        gauges.values["room_oldest_wait_seconds"] = oldest

    return refresh
