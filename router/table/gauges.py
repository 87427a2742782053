"""The management tables' gauges for a process's metrics endpoint (`router.metrics.exporter`):
open groups per destination, refreshed once an interval."""

from __future__ import annotations

import logging

import redis

from router.metrics.exporter import Refresh
from router.metrics.prom import Gauges
from router.metrics.registry import Metrics
from router.table.store.management import ManagementTable, Side

log = logging.getLogger("router.exporter")


def open_groups(tables: dict[Side, ManagementTable], metrics: Metrics) -> Refresh:
    """Refreshes the open groups per destination of `tables` (every destination, 0 too);
    not while Redis does not answer (the loop would wait for it twice an interval)."""

    def refresh(gauges: Gauges, redis_answers: bool) -> None:
        if not redis_answers:
            gauges.values.pop("open_groups", None)
            return
        values: dict[tuple[str, ...], float] = {}
        for side, table in tables.items():
            try:
                loads = table.loads()
            except redis.RedisError as exc:
                metrics.inc("redis_errors")
                log.debug("no open groups of the %s table this interval: %s", side, exc)
                continue
            for dest in table.destinations:
                values[(side, dest)] = float(loads.get(dest, 0))
        gauges.values["open_groups"] = values

    return refresh
