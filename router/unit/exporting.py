"""A transfer unit's metrics endpoint (`router.metrics.exporter`): its source lag, its side's open
groups and room, and its readiness, read from the unit's own objects."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from confluent_kafka import KafkaException, TopicPartition

from router.config.settings import RouterSettings
from router.metrics.exporter import Exporter
from router.metrics.prom import Gauges
from router.metrics.registry import Metrics, MetricsPublisher
from router.table.gauges import open_groups
from router.table.store.management import ManagementTable
from router.topology.side import SideSpec
from router.unit.commit.session import TransactionalSession
from router.unit.commit.txnstate import TxnState
from router.unit.source import Source
from router.unit.steps.batch import TP
from router.unit.steps.holds import Backoff

log = logging.getLogger("router.exporter")


class ExportedUnit(Protocol):
    """What the exporter reads of a transfer unit (or relay): `router.unit.loop.TransferUnit`."""

    settings: RouterSettings
    role: str
    spec: SideSpec
    metrics: Metrics
    publisher: MetricsPublisher
    session: TransactionalSession
    source: Source
    backoff: Backoff
    steps: Any  # the routing steps carry their side's `table`; the relay's none


def source_lag(consumer: Any, assigned: Iterable[TP]) -> dict[tuple[str, ...], float]:
    """Records between each assigned partition's position and its high watermark, as the
    consumer last fetched it (partitions it has no position or watermark for: left out)."""
    out: dict[tuple[str, ...], float] = {}
    try:
        for tp in consumer.position([TopicPartition(t, p) for t, p in list(assigned)]):
            if tp.offset < 0:
                continue
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
            if high is not None and high >= 0:
                out[(tp.topic, str(tp.partition))] = float(max(0, high - tp.offset))
    except KafkaException as exc:
        log.debug("no lag this interval: %s", exc)
    return out


def unit_exporter(unit: ExportedUnit) -> Exporter:
    """The exporter of a transfer unit (or relay): its own side's table, its sources. Its
    total source lag is also published with its counters (`source_lag`, for the console),
    whether or not it serves metrics."""
    session, source, backoff = unit.session, unit.source, unit.backoff
    unit.publisher.levels["source_lag"] = lambda: int(
        sum(source_lag(source.consumer, source.assigned).values())
    )
    table: ManagementTable | None = getattr(unit.steps, "table", None)
    # each cell's table (router.unit.steps.cells), or its one table (none: the raw relay)
    cells: list[ManagementTable] = getattr(unit.steps, "tables", [table] if table else [])
    side = unit.spec.side
    triples = [(side, c, t) for c, t in enumerate(cells)]
    tables = open_groups(triples, unit.metrics) if cells else None

    def refresh(gauges: Gauges, redis_answers: bool) -> None:
        gauges.values["source_lag"] = source_lag(source.consumer, source.assigned)
        if tables is not None:
            tables(gauges, redis_answers)

    def waiting() -> str | None:
        if backoff.until is not None:
            return "backing off: Redis or Kafka failed"
        if session.state in (TxnState.INIT, TxnState.FAILED, TxnState.BROKEN):
            return f"transactional producer {session.state.value}"
        return None

    return Exporter(
        unit.settings,
        unit.role,
        unit.metrics,
        unit.publisher,
        refresh=refresh,
        live={
            "inflight_batches": lambda: float(session.committing),
            "assigned_partitions": lambda: float(len(source.assigned)),
        },
        assigned=lambda: len(source.assigned),
        waiting=waiting,
    )
