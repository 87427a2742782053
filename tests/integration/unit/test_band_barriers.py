"""One transaction's records on a destination's band topics, appended in the order the table
decided them (issue 29's open defect: one interleaving under policy `wait`).

With priority bands a destination is several partitions, and the broker appends one
transaction's records on two partitions in no particular order: on this 2-core machine a
record produced after another, to another partition in the same transaction, was appended
a millisecond or more *earlier* in 650 of 1,500 transactions. The table decides a batch in
order and counts on that order: a final frees its destination for the rest of the batch
(`freed` in route.lua), and the batch's own ordinary messages on a destination do not keep
a new group of the same batch off it (`fenced` counts other batches only). So an ordinary
message decided after a group's final, on another band, could land inside the group's
span, and one decided before a new group's first could land after it: an interleaving,
which the capacity judge allows when every other destination was busy at some instant of
its decision window (a message delayed by a stall has a long one). `BandStep.retarget`
marks where a group's record and another band topic of the same destination meet
(`Output.barriers`), and the session has every earlier record appended before it goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from router import contract
from router.backends.kafka import clients
from router.config import KafkaSettings
from router.contract import priority
from router.metrics.registry import Metrics
from router.unit.commit.session import TransactionalSession
from router.unit.steps.bands import BandStep
from router.unit.steps.emit.records import Output, Record
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until

ROUNDS = 60  # without the barriers, P(no inversion in any round) was ~0.57^120 here
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


@pytest.fixture
def parts(kafka_bootstrap: str) -> Iterator[tuple[KafkaSettings, str, Consumer]]:
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, transaction_timeout_ms=10_000)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique("bands")})
    yield kafka, unique("txn"), consumer
    consumer.close()


def read_times(bootstrap: str, topics: list[str]) -> dict[bytes, int]:
    """value -> append time, of everything committed on partition 0 of `topics`."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("read"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(t, 0, 0) for t in topics])
    out: dict[bytes, int] = {}
    idle = time.monotonic()
    try:
        while time.monotonic() - idle < 5:
            for m in c.consume(500, 1.0):
                if m.error() is None:
                    out[m.value()] = m.timestamp()[1]
                    idle = time.monotonic()
    finally:
        c.close()
    return out


def test_what_a_batch_decided_around_a_group_is_appended_in_that_order_on_every_band(
    parts: tuple[KafkaSettings, str, Consumer], new_topic: TopicFactory, admin: AdminClient
) -> None:
    kafka, txn_id, consumer = parts
    source = new_topic("src")
    dest = new_topic("band-dest", config=APPEND_TIME)
    band1 = f"{dest}.p1"
    admin.create_topics([NewTopic(band1, 1, 1, config=APPEND_TIME)])[band1].result(30)

    def led() -> bool:
        # Just created, a topic's metadata may list it with no partition yet.
        topic = admin.list_topics(band1, timeout=5).topics.get(band1)
        partition = topic.partitions.get(0) if topic is not None else None
        return partition is not None and partition.leader >= 0

    wait_until(led, 30, f"{band1} has a leader")
    try:
        step = BandStep(2, (), [dest], None)
        config = clients.transactional_producer_config(kafka, txn_id, "test")
        session = TransactionalSession(lambda: Producer(config), threading.Event(), Metrics())
        assert session.start()
        for i in range(ROUNDS):
            # As route.lua decides one batch: group g's final frees the destination,
            # an ordinary message (band 1) goes there, then a new group h opens there.
            out = Output(
                records=[
                    Record(
                        dest,
                        0,
                        None,
                        b"final-%d" % i,
                        [(contract.GUARANTEE_ID, b"g%d" % i), (contract.FINAL, b"true")],
                        0,
                        None,
                    ),
                    Record(dest, 0, None, b"ordinary-%d" % i, [(priority.BAND, b"1")], 0, None),
                    Record(
                        dest,
                        0,
                        None,
                        b"first-%d" % i,
                        [(contract.GUARANTEE_ID, b"h%d" % i)],
                        0,
                        None,
                    ),
                ]
            )
            step.retarget(out)
            assert session.begin(session.generation)
            session.produce(out.records, None, out.barriers)
            session.commit([TopicPartition(source, 0, i + 1)], consumer.consumer_group_metadata())
            session.wait_committed()
        at = read_times(kafka.bootstrap_servers, [dest, band1])
        assert len(at) == 3 * ROUNDS
        late = [
            i
            for i in range(ROUNDS)
            if not at[b"final-%d" % i] <= at[b"ordinary-%d" % i] <= at[b"first-%d" % i]
        ]
        assert late == [], f"appended out of the decided order in rounds {late}"
    finally:
        admin.delete_topics([band1], operation_timeout=30)
