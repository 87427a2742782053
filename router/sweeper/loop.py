"""The sweeper: the patent's deletion process, for both management tables.

Each round, for the send-side and the receive-side table:
1. remove entries idle past their entry deletion time (TTL) whose deadline is also
   before the side's *horizon* (`router.sweeper.horizon`): every record written before it has
   been routed, so the sender really went quiet. Never from Redis alone: without a
   horizon (the broker away) nothing is swept. Each removed entry goes to the table's
   outbox in the same Lua call;
2. publish an AbandonedGroup event (Avro, `schemas/router/AbandonedGroup.avsc`) for every
   outbox item to the events topic, and drop the items only once Kafka acknowledged them
   (so events are at-least-once and never lost, even if the sweeper dies mid-round);
3. finish interrupted releases: an entry still "closing" after `closing_grace_ms` had a
   unit die between committing its final message and releasing it. If the consumer group's
   committed offset has passed the final, the group is complete and the entry is released;
   otherwise the final will be replayed and released by the unit that replays it;
4. end the in-flight and park leases that expired (`router.table.room.expire`), which route
   calls otherwise do: once nothing is routed any more, a dead unit's or a failed batch's
   lease must not keep a destination from the waiting groups, nor an admitted group shut.

Several sweepers may run at once; the Lua calls are atomic, events may then repeat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import redis
from confluent_kafka import KafkaException

from router.backends.kafka import clients
from router.backends.kafka.fatal import fatal_unmasked, is_fatal
from router.backends.kafka.offsets import CommittedOffsets
from router.backends.redis import client as redisclient
from router.backends.redis.client import RedisClient
from router.config.settings import RouterSettings
from router.contract.registered import frame_events_at_start
from router.metrics.exporter import Exporter
from router.metrics.registry import Metrics, MetricsPublisher, metrics_key
from router.security import kafka as kafkaauth
from router.security.redis import check_access
from router.sweeper import publish
from router.sweeper.horizon import HorizonReader, Horizons, HorizonUnknown
from router.sweeper.logs import at, named
from router.sweeper.publish import BROKER_TIMEOUT_S
from router.table.gauges import open_groups
from router.table.store.management import ManagementTable, Side
from router.topology import cells
from router.topology.side import side_spec, table_for

log = logging.getLogger("router.sweeper")
# Once a minute per kind of message: an outage makes every round say the same.
horizon_log = logging.getLogger("router.sweeper.horizon")
horizon_log.addFilter(clients.RepeatFilter(60.0))

WRITERS_EVERY_S = 600.0  # how often idle callers leave the tables' writers hashes

SIDES: tuple[Side, ...] = ("send", "receive")


@dataclass
class SweepReport:
    swept: int = 0
    published: int = 0
    resolved: int = 0
    wait_timeouts: int = 0
    leases_ended: int = 0
    writers_forgotten: int = 0


class Sweeper:
    def __init__(
        self,
        settings: RouterSettings,
        *,
        redis_client: RedisClient | None = None,
        horizons: HorizonReader | None = None,
    ):
        self.settings = settings
        self.instance = clients.instance_id()
        self._redis = redis_client or redisclient.redis_client(settings.redis)
        self.tables: dict[Side, ManagementTable] = {
            side: table_for(settings, side, self._redis) for side in SIDES
        }
        # every table: each side of each cell (`router.topology.cells`), cell 0 first
        self.cell_tables: list[tuple[Side, int, ManagementTable]] = [
            (side, c, self.tables[side] if c == 0 else table_for(settings, side, self._redis, c))
            for c in cells.all_cells(settings)
            for side in SIDES
        ]
        self.metrics = Metrics()
        self._publisher = MetricsPublisher(
            self.metrics,
            self._redis,
            metrics_key(
                settings.redis.key_prefix, settings.topology.name, "sweeper", self.instance
            ),
            settings.unit.metrics_interval_ms,
        )
        self._events = publish.EventsProducer(settings.kafka, self.instance, self.metrics)
        self._committed = CommittedOffsets(settings.kafka, self.instance)
        self.horizons = horizons or HorizonReader(settings, self.instance, timeout=BROKER_TIMEOUT_S)
        self._stop = threading.Event()
        self._writers_at: float | None = None  # time.monotonic() of the last pruning
        self.exporter = Exporter(
            settings,
            "sweeper",
            self.metrics,
            self._publisher,
            refresh=open_groups(self.cell_tables, self.metrics),
            period_s=settings.sweeper.interval_ms / 1000,
        )

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        interval = self.settings.sweeper.interval_ms / 1000
        log.info("sweeper %s starting, every %.1fs", self.instance, interval)
        # RedisRefused, KafkaRefused: retrying cannot help
        check_access(self._redis, self.settings)
        kafkaauth.check_access(self.settings, "sweeper")
        if not frame_events_at_start(self.settings.registry, self._stop, "sweeper"):
            return 0
        # What senders held back before this process started is unknown: as after an outage.
        self.horizons.after_outage()
        self.exporter.start()
        while not self._stop.is_set():
            self._round()
            self._publisher.maybe_publish()
            self._stop.wait(interval)  # a periodic job's timer, not synchronisation
        try:  # the rounds flushed what they published; the outbox keeps anything else
            self._round(lambda: self._events.producer.flush(BROKER_TIMEOUT_S))
        finally:
            self._committed.close()
            self.horizons.close()
            self._publisher.maybe_publish(force=True)
            self.exporter.stop()
            self._events.close()
        return 0

    def _round(self, work: Callable[[], object] | None = None) -> None:
        """One round (or `work`), its failure logged: the next round tries again, with a new
        events producer if this one failed fatally. The log and this frame keep only the
        error's text: the exception's traceback holds the producer."""
        replace = False
        try:
            with fatal_unmasked():
                (work or self.run_once)()
        except (redis.RedisError, KafkaException) as exc:
            redis_error = isinstance(exc, redis.RedisError)
            self.metrics.inc("redis_errors" if redis_error else "kafka_errors")
            log.warning("sweep round failed, retrying next round: %s", str(exc))
            replace = not redis_error and is_fatal(cast(KafkaException, exc))
        if replace and not self._stop.is_set():  # (not for the last flush)
            self._events.replace()

    def run_once(self) -> SweepReport:
        report = SweepReport()
        report.swept = self._sweep_expired()
        for side, _, table in self.cell_tables:
            report.published += publish.outbox(self._events.producer, self.settings, side, table)
            report.resolved += self._resolve_closing(side, table)
            report.leases_ended += self._end_leases(side, table)
            report.wait_timeouts += publish.end_waits(
                self._events.producer, self.settings, self.metrics, side, table
            )
        report.writers_forgotten = self._forget_idle_writers()
        self.metrics.inc("swept", report.swept)
        self.metrics.inc("abandoned_events", report.published)
        self.metrics.inc("closing_resolved", report.resolved)
        return report

    def _forget_idle_writers(self) -> int:
        """Every WRITERS_EVERY_S, or half of `sweeper.writer_idle_s` if shorter (and on the
        first round): callers of the route script idle for `writer_idle_s` (a day by
        default) leave the writers hash (`router.table.store.writers`)."""
        now = time.monotonic()
        every = min(WRITERS_EVERY_S, self.settings.sweeper.writer_idle_s / 2)
        if self._writers_at is not None and now - self._writers_at < every:
            return 0
        self._writers_at = now
        total = 0
        for side, cell, table in self.cell_tables:
            gone, kept = table.forget_idle_writers()
            if gone:
                log.info(
                    "%s table: forgot %d idle unit processes, %d remain",
                    named(side, cell),
                    gone,
                    kept,
                )
            total += gone
        return total

    def _end_leases(self, side: Side, table: ManagementTable) -> int:
        ended, admitted = table.expire_leases()
        if ended:
            log.info("%s table: %d expired leases ended, %d groups admitted", side, ended, admitted)
        return ended

    def _sweep_expired(self) -> int:
        """Sweep, on each side, the entries whose deadline is before now and the side's
        horizon; with no horizon (the broker away), none."""
        now = self.tables["send"].now_ms()
        cutoff = now - self.horizons.delivery_slack_ms
        due: dict[int, float] = {}  # index in cell_tables -> its oldest deadline
        for i, (_, _, table) in enumerate(self.cell_tables):
            # redis-py types sync and async results as one union; this client is synchronous.
            oldest: Any = self._redis.zrange(table.keys.deadlines, 0, 0, withscores=True)
            if oldest and float(oldest[0][1]) < cutoff:
                due[i] = float(oldest[0][1])
        try:
            horizons = self.horizons.round(now, min(due.values()) if due else None)
        except HorizonUnknown as exc:
            self.metrics.inc("horizon_unknown")
            if exc.__cause__ is not None:  # the broker did not answer (not a grace period)
                self.metrics.inc("kafka_errors")
            if due:
                horizon_log.warning(
                    "not sweeping this round, no horizon (%s table has entries past their "
                    "TTL since %s): %s",
                    " and ".join(sorted({self.cell_tables[i][0] for i in due})),
                    at(min(due.values())),
                    exc,
                )
            return 0
        if horizons is None:
            return 0
        swept = 0
        deferred = False
        for i, oldest_deadline in due.items():
            side, cell, table = self.cell_tables[i]
            horizon = horizons.of(side)
            if horizon <= oldest_deadline:
                deferred = True
                horizon_log.info(
                    "%s table: entries past their TTL since %s kept, their side's horizon "
                    "is %s (records written before it not yet all routed%s)",
                    named(side, cell),
                    at(oldest_deadline),
                    at(horizon),
                    f": {horizons.note}" if horizons.note else "",
                )
                continue
            swept += self._sweep_side(side, table, horizons, cell)
        if deferred:
            self.metrics.inc("sweep_deferred")
        return swept

    def _sweep_side(
        self, side: Side, table: ManagementTable, horizons: Horizons, cell: int = 0
    ) -> int:
        limit = self.settings.sweeper.batch
        horizon = int(horizons.of(side))  # finite: at most now - the delivery slack
        count = 0
        while True:
            swept = table.sweep(limit, horizon_ms=horizon)
            count += len(swept)
            for s in swept:
                log.info(
                    "%s table: swept abandoned group %r (destination %s, idle > %d ms, "
                    "every record written before %s routed)",
                    named(side, cell),
                    s.guarantee_id,
                    s.entry.dest,
                    s.entry.ttl_ms,
                    at(horizon),
                )
            if len(swept) < limit:
                return count

    def _resolve_closing(self, side: Side, table: ManagementTable) -> int:
        cutoff = table.now_ms() - self.settings.sweeper.closing_grace_ms
        pending = table.closing_since(cutoff)
        if not pending:
            return 0
        by_tp: dict[tuple[str, int], list[tuple[str, str, int]]] = defaultdict(list)
        for gid, token in pending:
            topic, partition, offset = token.rsplit("/", 2)
            by_tp[(topic, int(partition))].append((gid, token, int(offset)))
        group = side_spec(self.settings, side).group_id
        # KafkaException if the broker does not answer: the round fails, the next retries.
        committed = self._committed.read(group, list(by_tp), timeout=BROKER_TIMEOUT_S)
        done = [
            (gid, token)
            for tp, finals in by_tp.items()
            for gid, token, offset in finals
            if committed.get(tp, -1) > offset
        ]
        released = table.release(done)
        if released:
            log.info("%s table: completed %d interrupted releases", side, released)
        return released
