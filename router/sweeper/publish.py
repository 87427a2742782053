"""What the sweeper publishes to the events topic: the AbandonedGroup events of the entries
it swept (from the table's outbox, dropped only once Kafka acknowledged them) and the
GroupWaitTimedOut events of the groups that waited too long in the room."""

from __future__ import annotations

import logging

from confluent_kafka import Producer

from router.backends.kafka import clients
from router.config.settings import KafkaSettings, RouterSettings
from router.contract import events, schemas
from router.metrics.registry import Metrics
from router.table import room
from router.table.routing import STOPPED, Swept
from router.table.store.management import ManagementTable, Side

log = logging.getLogger("router.sweeper")

# How long one round waits for the broker (event deliveries) before giving up until the
# next round; short enough that SIGTERM is honoured well inside a minute.
BROKER_TIMEOUT_S = 10.0


class EventsProducer:
    """The sweeper's idempotent producer of its events, replaced when it fails fatally (a
    new one publishes from the next round; the outboxes keep what the old one did not get
    acknowledged)."""

    def __init__(self, kafka: KafkaSettings, instance: str, metrics: Metrics) -> None:
        self._config = clients.idempotent_producer_config(kafka, instance)
        self.metrics = metrics
        self.producer = Producer(self._config)

    def replace(self) -> None:
        log.warning("the events producer failed fatally; replaced by a new one")
        self.metrics.inc("producer_restarts")
        old, self.producer = [self.producer], Producer(self._config)
        clients.dispose_in_background(old)


def outbox(producer: Producer, settings: RouterSettings, side: Side, table: ManagementTable) -> int:
    """Publish the outbox's AbandonedGroup events; drop the items only once Kafka
    acknowledged them (kept for the next round otherwise)."""
    published = 0
    topic = settings.topology.events_topic
    while True:
        items = table.outbox(500)
        if not items:
            return published
        failures: list[str] = []

        def delivered(err: object, _msg: object, failures: list[str] = failures) -> None:
            if err is not None:
                failures.append(str(err))

        for s in items:
            producer.produce(
                topic,
                abandoned(s, side, settings.topology.name),
                s.guarantee_id.encode(),
                headers=[(schemas.SCHEMA_HEADER, events.ABANDONED_GROUP.encode())],
                on_delivery=delivered,
            )
        remaining = producer.flush(BROKER_TIMEOUT_S)
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


def end_waits(
    producer: Producer,
    settings: RouterSettings,
    metrics: Metrics,
    side: Side,
    table: ManagementTable,
) -> int:
    """Groups in the waiting room past routing.max_wait_ms: reported once and still
    waiting, shared or dead-lettered (routing.wait_timeout_policy), each with a
    GroupWaitTimedOut event. The script that ends a wait also appends its event to the
    table's waits outbox, published here and dropped only once Kafka acknowledged it (so
    an event is never lost, even if the producer fails or the sweeper dies)."""
    r = settings.routing
    ended: list[tuple[str, str]] = []
    if r.max_wait_ms:
        _, ended = table.room_timeout(r.max_wait_ms, r.wait_timeout_policy)
    for gid, outcome in ended:
        log.warning(
            "%s table: group %r waited more than %d ms in the room: %s",
            side,
            gid,
            r.max_wait_ms,
            "dead-lettered"
            if outcome == STOPPED
            else "still waiting"
            if outcome == room.WAIT
            else f"shared on {outcome}",
        )
    metrics.inc("wait_timeouts", len(ended))
    topic, topology = settings.topology.events_topic, settings.topology.name
    while items := table.waits_out(500):
        failures: list[str] = []

        def delivered(err: object, _msg: object, failures: list[str] = failures) -> None:
            if err is not None:
                failures.append(str(err))

        for now, outcome, gid in items:
            producer.produce(
                topic,
                events.group_wait_timed_out(
                    gid,
                    None if outcome in (STOPPED, room.WAIT) else outcome,
                    waiting=outcome == room.WAIT,
                    side=side,
                    topology=topology,
                    max_wait_ms=r.max_wait_ms,
                    now_ms=now,
                ),
                gid.encode(),
                headers=[(schemas.SCHEMA_HEADER, events.GROUP_WAIT_TIMED_OUT.encode())],
                on_delivery=delivered,
            )
        remaining = producer.flush(BROKER_TIMEOUT_S)
        if remaining or failures:
            log.warning(
                "wait time-out events not acknowledged (%d pending, errors: %s); "
                "kept for the next round",
                remaining,
                failures[:3],
            )
            break
        table.ack_waits_out(len(items))
    return len(ended)


def abandoned(swept: Swept, side: str, topology: str) -> bytes:
    """The AbandonedGroup event of an entry the sweep removed."""
    e = swept.entry
    return events.abandoned_group(
        swept.guarantee_id,
        side=side,
        topology=topology,
        destination=e.dest,
        opened_ms=e.opened_ms,
        updated_ms=e.updated_ms,
        ttl_ms=e.ttl_ms,
        swept_ms=swept.swept_ms,
        final_routed=bool(e.closing) and e.closing != STOPPED,
        stopped=e.closing == STOPPED,
    )
