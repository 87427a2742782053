"""`router.backends.kafka.endoffsets.EndOffsets` against the real broker: the end a read_committed
consumer sees (an open transaction's records are not in it, a committed one's and its
marker are), every partition in one answer, an unknown partition left out."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.stack.localstack import LocalStack
from router.backends.kafka.endoffsets import EndOffsets
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import wait_until


def test_end_offsets_are_the_last_stable_offsets(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = new_topic("ends", partitions=2)
    ends = EndOffsets({"bootstrap.servers": kafka_bootstrap})
    # A new topic's partition answers NOT_LEADER_FOR_PARTITION until the broker has taken
    # its leadership (after the topic shows in metadata): left out of the answer until then.
    wait_until(
        lambda: ends([(topic, 0), (topic, 1)]) == {(topic, 0): 0, (topic, 1): 0},
        30,
        "an empty topic's end offsets: 0 on both partitions",
    )

    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"ends-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"c{i}".encode(), partition=0)
    producer.commit_transaction(30)  # records 0..2 and a commit marker at 3
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    producer.produce(topic, b"open", partition=1)
    producer.flush(30)  # appended, not committed
    try:
        # A consumer of the topic long-polls meanwhile, as a unit's does.
        consumer = Consumer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "group.id": f"ends-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        read = [m.value() for m in consumer.consume(10, 5) if m.error() is None]
        assert read == [b"c0", b"c1", b"c2"]
        got = ends([(topic, 0), (topic, 1), (topic, 0)])
        assert got == {(topic, 0): 4, (topic, 1): 0}
        assert got[(topic, 0)] == consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)[1]
        consumer.close()
    finally:
        producer.abort_transaction(30)
    # The abort's markers are written to the partitions after abort_transaction returns.
    wait_until(
        lambda: ends([(topic, 0), (topic, 1)]) == {(topic, 0): 6, (topic, 1): 2},
        30,
        "the aborted transaction's records and markers inside the end",
    )
    assert ends([(topic, 0), (topic, 7)]) == {(topic, 0): 6}  # no partition 7: left out
    assert ends([]) == {}


def test_end_offsets_are_answered_again_after_a_broker_restart(
    private_stack: LocalStack,
) -> None:
    """A restart moves every partition's leader epoch on. The admin connection's metadata
    still names the old epoch, and the broker refuses each request that carries it
    (FENCED_LEADER_EPOCH) for as long as that metadata is kept (librdkafka refreshes it
    after `metadata.max.age.ms`, 15 min): found in a chaos run, whose waiting-room drain
    asked 20 times a second until its deadline. The admin client is made again instead."""
    config = {"bootstrap.servers": private_stack.bootstrap}
    topic = f"ends-restart-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer(config)
    for i in range(5):
        producer.produce(topic, f"m{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    ends = EndOffsets(config, timeout_s=5.0)
    wait_until(
        lambda: ends([(topic, 0), (topic, 1)]) == {(topic, 0): 5, (topic, 1): 0},
        30,
        "the end offsets before the restart",
    )
    private_stack.restart_kafka()
    wait_until(
        lambda: ends([(topic, 0), (topic, 1)]) == {(topic, 0): 5, (topic, 1): 0},
        60,
        "the end offsets after the restart",
    )
