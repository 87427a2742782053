"""The sweeper: the patent's deletion process, for both management tables.

Each round, for the send-side and the receive-side table:
1. remove entries idle past their entry deletion time (TTL); each goes to the table's
   outbox in the same Lua call;
2. publish an AbandonedGroup event (Avro, `schemas/router/AbandonedGroup.avsc`) for every
   outbox item to the events topic, and drop the items only once Kafka acknowledged them
   (so events are at-least-once and never lost, even if the sweeper dies mid-round);
3. finish interrupted releases: an entry still "closing" after `closing_grace_ms` had a
   unit die between committing its final message and releasing it. If the consumer group's
   committed offset has passed the final, the group is complete and the entry is released;
   otherwise the final will be replayed and released by the unit that replays it.

Several sweepers may run at once; the Lua calls are atomic, events may then repeat.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass

import redis
from confluent_kafka import KafkaException, Producer

from router import clients, events, schemas
from router.config import RouterSettings
from router.metrics import Metrics, MetricsPublisher, metrics_key
from router.offsets import CommittedOffsets
from router.side import side_spec, table_for
from router.table import ManagementTable, Side

log = logging.getLogger("router.sweeper")

# How long one round waits for the broker (offsets, event deliveries) before giving up
# until the next round; short enough that SIGTERM is honoured well inside a minute.
BROKER_TIMEOUT_S = 10.0

SIDES: tuple[Side, ...] = ("send", "receive")


@dataclass
class SweepReport:
    swept: int = 0
    published: int = 0
    resolved: int = 0


class Sweeper:
    def __init__(self, settings: RouterSettings, *, redis_client: redis.Redis | None = None):
        self.settings = settings
        self.instance = clients.instance_id()
        self._redis = redis_client or clients.redis_client(settings.redis)
        self.tables: dict[Side, ManagementTable] = {
            side: table_for(settings, side, self._redis) for side in SIDES
        }
        self.metrics = Metrics()
        self._publisher = MetricsPublisher(
            self.metrics,
            self._redis,
            metrics_key(
                settings.redis.key_prefix, settings.topology.name, "sweeper", self.instance
            ),
            settings.unit.metrics_interval_ms,
        )
        self._producer = Producer(clients.idempotent_producer_config(settings.kafka, self.instance))
        self._committed = CommittedOffsets(settings.kafka, self.instance)
        self._stop = threading.Event()

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        interval = self.settings.sweeper.interval_ms / 1000
        log.info("sweeper %s starting, every %.1fs", self.instance, interval)
        while not self._stop.is_set():
            try:
                self.run_once()
            except (redis.RedisError, KafkaException) as exc:
                log.warning("sweep round failed, retrying next round: %s", exc)
            self._publisher.maybe_publish()
            self._stop.wait(interval)  # a periodic job's timer, not synchronisation
        self._producer.flush(BROKER_TIMEOUT_S)
        self._committed.close()
        self._publisher.maybe_publish(force=True)
        return 0

    def run_once(self) -> SweepReport:
        report = SweepReport()
        for side, table in self.tables.items():
            limit = self.settings.sweeper.batch
            while True:
                swept = table.sweep(limit)
                report.swept += len(swept)
                for s in swept:
                    log.info(
                        "%s table: swept abandoned group %r (destination %s, idle > %d ms)",
                        side,
                        s.guarantee_id,
                        s.entry.dest,
                        s.entry.ttl_ms,
                    )
                if len(swept) < limit:
                    break
            report.published += self._publish_outbox(side, table)
            report.resolved += self._resolve_closing(side, table)
        self.metrics.inc("swept", report.swept)
        self.metrics.inc("abandoned_events", report.published)
        self.metrics.inc("closing_resolved", report.resolved)
        return report

    def _publish_outbox(self, side: Side, table: ManagementTable) -> int:
        published = 0
        topic = self.settings.topology.events_topic
        while True:
            items = table.outbox(500)
            if not items:
                return published
            failures: list[str] = []

            def delivered(err: object, _msg: object, failures: list[str] = failures) -> None:
                if err is not None:
                    failures.append(str(err))

            for s in items:
                self._producer.produce(
                    topic,
                    events.abandoned_group(s, side, self.settings.topology.name),
                    s.guarantee_id.encode(),
                    headers=[(schemas.SCHEMA_HEADER, events.ABANDONED_GROUP.encode())],
                    on_delivery=delivered,
                )
            remaining = self._producer.flush(BROKER_TIMEOUT_S)
            if remaining or failures:
                log.warning(
                    "abandoned-group events not acknowledged (%d pending, errors: %s); "
                    "kept in the outbox for the next round",
                    remaining,
                    failures[:3],
                )
                return published
            table.ack_outbox(len(items))
            published += len(items)

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
