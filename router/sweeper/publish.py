"""What the sweeper publishes to the events topic: the AbandonedGroup events of the entries
it swept (from the table's outbox, dropped only once Kafka acknowledged them) and the
GroupWaitTimedOut events of the groups that waited too long in the room."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Producer

from router.backends.kafka import clients
from router.config.settings import KafkaSettings, RouterSettings
from router.contract import events, schemas
from router.metrics.registry import Metrics
from router.table import room
from router.table.routing import STOPPED, Swept
from router.table.store.codec import outbox_item
from router.table.store.management import ManagementTable, Side
from router.table.store.outboxes import wait_item

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

    def close(self) -> None:
        """At the end: its handle destroyed off the caller's thread (librdkafka#5476)."""
        clients.dispose_in_background([self.__dict__.pop("producer")])


def outbox(producer: Producer, settings: RouterSettings, side: Side, table: ManagementTable) -> int:
    """Publish the outbox's AbandonedGroup events; drop the items only once Kafka
    acknowledged them (kept for the next round otherwise)."""
    topology = settings.topology.name

    def event(raw: bytes) -> tuple[bytes, bytes]:
        swept = outbox_item(raw)
        return swept.guarantee_id.encode(), abandoned(swept, side, topology)

    what, key = f"{side} table: abandoned-group events", table.keys.outbox
    return _publish(producer, settings, table, key, events.ABANDONED_GROUP, what, event)


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
    if ended:
        metrics.inc("wait_timeouts", len(ended))
    topology = settings.topology.name

    def event(raw: bytes) -> tuple[bytes, bytes]:
        now, max_wait_ms, outcome, gid = wait_item(raw)
        value = events.group_wait_timed_out(
            gid,
            None if outcome in (STOPPED, room.WAIT) else outcome,
            waiting=outcome == room.WAIT,
            side=side,
            topology=topology,
            max_wait_ms=max_wait_ms,
            now_ms=now,
        )
        return gid.encode(), value

    what = f"{side} table: wait time-out events"
    key = table.keys.waits_out
    _publish(producer, settings, table, key, events.GROUP_WAIT_TIMED_OUT, what, event)
    return len(ended)


def _publish(
    producer: Producer,
    settings: RouterSettings,
    table: ManagementTable,
    key: str,
    schema: str,
    what: str,
    event: Callable[[bytes], tuple[bytes, bytes]],
) -> int:
    """Publish an outbox list's events, 500 at a time; drop each batch once Kafka
    acknowledged it (`OutboxTable.acked`: what another sweeper dropped meanwhile is left
    to it). An item that cannot become an event is logged with its text and dropped."""
    published = 0
    topic, headers = settings.topology.events_topic, [(schemas.SCHEMA_HEADER, schema.encode())]
    while items := table.items(key, 500):
        failures: list[str] = []

        def delivered(err: object, _msg: object, failures: list[str] = failures) -> None:
            if err is not None:
                failures.append(str(err))

        for raw in items:
            try:
                k, value = event(raw)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                log.error("%s: a malformed item dropped (%s): %r", what, exc, raw[:300])
                continue
            producer.produce(topic, value, k, headers=headers, on_delivery=delivered)
        remaining = producer.flush(BROKER_TIMEOUT_S)
        if remaining or failures:
            log.warning(
                "%s not acknowledged (%d pending, errors: %s); kept for the next round",
                what,
                remaining,
                failures[:3],
            )
            break
        published += len(items)
        if table.acked(key, items) < len(items):
            break  # another sweeper dropped some: it goes on, this one in its next round
    return published


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
