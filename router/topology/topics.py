"""`router topics create`: create what the topology needs, idempotently."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from router.config.settings import KafkaSettings, RouterSettings
from router.contract.priority import band_topics
from router.errors import ConfigError, TimedOut

log = logging.getLogger("router.topics")

HEADROOM = 65_536  # room for headers and record overhead above kafka.max_message_bytes


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]
    role: str
    may_grow: bool = False  # partitions may be added without breaking a guarantee


@dataclass
class TopicReport:
    created: list[str] = field(default_factory=list)
    grown: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def replication(kafka: KafkaSettings, brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for the topology's topics on a cluster of
    `brokers`: the settings', else three copies once there are three brokers (fewer on a
    smaller cluster) and min.insync.replicas=2 once there are three copies. With the
    producers' acks=all, a record is then acknowledged only once two brokers hold it: one
    broker may be lost without losing an acknowledged record, and with two away the
    producers get NOT_ENOUGH_REPLICAS (and retry) rather than a write held by one."""
    factor = kafka.replication_factor or max(1, min(3, brokers))
    insync = kafka.min_insync_replicas or (2 if factor >= 3 else 1)
    return factor, insync


def plan(settings: RouterSettings, brokers: int = 1) -> list[TopicSpec]:
    t, k = settings.topology, settings.kafka
    base = {
        "min.insync.replicas": str(replication(k, brokers)[1]),
        "max.message.bytes": str(k.max_message_bytes + HEADROOM),
        "message.timestamp.type": "CreateTime",
    }
    dead = {**base, "max.message.bytes": str(2 * k.max_message_bytes + HEADROOM)}
    # every band of a queue has its own topic (router.contract.priority)
    n = settings.priority.bands
    specs = [
        TopicSpec(b, t.send_queue_partitions, base, "send queue")
        for q in t.send_queues
        for b in band_topics(q, n)
    ]
    # One partition per receive-side transfer unit; adding units adds partitions safely
    # because the send side addresses partitions explicitly.
    specs += [
        TopicSpec(b, t.receive_units, base, "transfer", may_grow=True)
        for b in band_topics(t.transfer_topic, n)
    ]
    # A receive queue is one partition: one receiver, one order.
    specs += [
        TopicSpec(b, 1, base, "receive queue") for q in t.receive_queues for b in band_topics(q, n)
    ]
    # The waiting rooms (router/table/room.py): never compacted; kept longer than any group waits.
    rooms = settings.routing.room_partitions
    specs += [
        TopicSpec(t.room_topic(s), rooms, base, f"{s}-side waiting room")
        for s in ("send", "receive")
    ]
    specs.append(TopicSpec(t.events_topic, 1, base, "router events"))
    specs.append(TopicSpec(t.dead_letter_topic, 1, dead, "dead letters"))
    return specs


def ensure_topics(settings: RouterSettings, admin: AdminClient, timeout: float = 30) -> TopicReport:
    report = TopicReport()
    cluster = admin.list_topics(timeout=timeout)
    brokers = len(cluster.brokers)
    factor, insync = replication(settings.kafka, brokers)
    if factor > brokers:
        raise ConfigError(
            f"kafka.replication_factor is {factor} but the cluster has {brokers} broker(s)"
        )
    specs = plan(settings, brokers)
    existing = cluster.topics
    missing = [s for s in specs if s.name not in existing]
    if missing:
        log.info(
            "creating %d topics: replication factor %d, min.insync.replicas %d",
            len(missing),
            factor,
            insync,
        )
        futures = admin.create_topics(
            [
                NewTopic(
                    s.name,
                    num_partitions=s.partitions,
                    replication_factor=factor,
                    config=s.config,
                )
                for s in missing
            ],
            operation_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
                report.created.append(name)
            except Exception as exc:  # created meanwhile (or not yet in metadata): check it
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
        existing = _metadata(admin, [s.name for s in specs], timeout)
    grow = []
    for s in specs:
        meta = existing.get(s.name)
        if meta is None or s.name in report.created:
            continue
        report.existing.append(s.name)
        have = len(meta.partitions)
        if have < s.partitions and s.may_grow:
            grow.append(NewPartitions(s.name, s.partitions))
        elif have != s.partitions:
            report.warnings.append(
                f"{s.role} {s.name} has {have} partitions, the topology expects {s.partitions}"
                + (" (only partition 0 is used)" if s.role == "receive queue" else "")
            )
    if grow:
        for name, future in admin.create_partitions(grow, operation_timeout=timeout).items():
            future.result(timeout=timeout)
            report.grown.append(name)
    for w in report.warnings:
        log.warning(w)
    return report


def _metadata(admin: AdminClient, names: list[str], timeout: float) -> dict[str, Any]:
    """Topic metadata once every name is visible (a new topic reaches metadata shortly
    after it is created)."""
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=timeout).topics
        if all(n in topics and topics[n].error is None for n in names):
            return dict(topics)
        if time.monotonic() > deadline:
            missing = [n for n in names if n not in topics]
            raise TimedOut(f"topics {missing} not in metadata after {timeout}s")
        time.sleep(0.1)
