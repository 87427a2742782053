"""Units built and stepped in the test's own process, against the real broker and Redis:
the run loop's sequences (rebalances, failed commits) driven one step at a time."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from router.backends.kafka.offsets import CommittedOffsets
from router.config import KafkaSettings, RouterSettings
from router.table.store.management import Side
from router.topology.side import side_spec
from router.unit.loop import TransferUnit
from tests.helpers import unique


def started_unit(settings: RouterSettings, side: Side, partitions: int) -> TransferUnit:
    """A unit whose transactions are initialised and that holds `partitions` partitions."""
    unit = TransferUnit(settings, side_spec(settings, side))
    assert unit.session.start()
    unit.source.subscribe(list(unit.spec.sources), unit._on_assign, unit._on_revoke)
    step_until(unit, lambda: len(unit.source.assigned) == partitions, 30, "assignment")
    return unit


def step_until(unit: TransferUnit, done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        unit.step()


def stop(unit: TransferUnit) -> None:
    if unit._inflight is not None:
        unit._complete()
    unit.session.abort()
    unit.source.close()


def limit_record_size(admin: AdminClient, topic: str, max_bytes: int) -> None:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "max.message.bytes",
                str(max_bytes),
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    send(bootstrap, topic, [(partition, v, None) for v in values])


def send(
    bootstrap: str, topic: str, records: list[tuple[int, bytes, list[tuple[str, bytes]] | None]]
) -> None:
    """Produce (partition, value, headers) records, in order, and wait for them."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, value, headers in records:
        p.produce(topic, value, partition=partition, headers=headers)
    assert p.flush(30) == 0


def read_to_end(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes]:
    """Every committed record's value of `topic`, read to its end offsets."""
    return [value for value, _ in read_records(bootstrap, topic, partitions)]


def read_records(
    bootstrap: str, topic: str, partitions: int = 1
) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """Every committed record of `topic` as (value, headers), read to its end offsets."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("read"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[bytes, list[tuple[str, bytes]]]] = []
    ended = 0
    try:
        while ended < partitions:
            m = c.poll(10)
            assert m is not None, f"{topic} not read to its end"
            if m.error() is not None:
                ended += 1
            else:
                out.append((m.value(), m.headers() or []))
    finally:
        c.close()
    return out


def committed(kafka: KafkaSettings, group: str, topic: str, partition: int) -> int:
    """The group's last committed offset (-1 if none), without waiting for a pending
    transaction to decide (a unit's failing transaction may be pending)."""
    offsets = CommittedOffsets(kafka, unique("probe"), stable=False)
    try:
        return offsets.read(group, [(topic, partition)], timeout=10).get((topic, partition), -1)
    finally:
        offsets.close()
