"""Smoke tests: the servers the stack hands out are real, modern and behave as the router needs.

Each test asserts on what came back from the server, so it fails against a missing or
broken server (or a Kafka-compatible substitute without transactions or KIP-848).
"""

from __future__ import annotations

import redis
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until


def _read_all(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []

    def got_all() -> bool:
        for msg in consumer.consume(num_messages=100, timeout=0.2):
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        return len(values) >= expected

    try:
        wait_until(got_all, 30, f"{expected} records ({isolation}) from {topic}")
        # Anything beyond `expected` would show up now: the end of the log is already known.
        got_all()
    finally:
        consumer.close()
    return values


def test_transactions_read_committed_sees_committed_and_not_aborted(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = new_topic("txn")
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": unique("smoke-txn")}
    )
    producer.init_transactions(30)

    def transaction(values: list[bytes], commit: bool) -> None:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    transaction([b"c1", b"c2", b"c3"], commit=True)
    transaction([b"a1", b"a2"], commit=False)
    transaction([b"c4"], commit=True)

    assert _read_all(kafka_bootstrap, topic, "read_committed", 4) == [b"c1", b"c2", b"c3", b"c4"]
    # The aborted records really are in the log: an uncommitted reader sees all six.
    assert _read_all(kafka_bootstrap, topic, "read_uncommitted", 6) == [
        b"c1",
        b"c2",
        b"c3",
        b"a1",
        b"a2",
        b"c4",
    ]


def _member(bootstrap: str, group: str, topic: str, protocol: str) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "group.protocol": protocol,
    }
    if protocol == "classic":
        config["session.timeout.ms"] = 6000
        config["heartbeat.interval.ms"] = 500
    consumer = Consumer(config)
    consumer.subscribe([topic])
    return consumer


def _partitions(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_consumer_group_rebalances_when_a_member_joins_and_leaves(
    kafka_bootstrap: str, new_topic: TopicFactory, group_id: str
) -> None:
    topic = new_topic("rebalance", partitions=4)
    first = _member(kafka_bootstrap, group_id, topic, "classic")
    second: Consumer | None = None
    try:

        def first_owns_all() -> bool:
            first.poll(0.1)
            return _partitions(first) == {0, 1, 2, 3}

        wait_until(first_owns_all, 30, "the only member to own all 4 partitions")

        second = _member(kafka_bootstrap, group_id, topic, "classic")
        joined = second

        def split_between_two() -> bool:
            first.poll(0.1)
            joined.poll(0.1)
            a, b = _partitions(first), _partitions(joined)
            return bool(a) and bool(b) and not (a & b) and (a | b) == {0, 1, 2, 3}

        wait_until(split_between_two, 60, "the 4 partitions split between two members")

        second.close()
        second = None
        wait_until(first_owns_all, 60, "the remaining member to take all partitions back")
    finally:
        first.close()
        if second is not None:
            second.close()


def test_kip848_consumer_protocol_gets_an_assignment(
    kafka_bootstrap: str, new_topic: TopicFactory, group_id: str, admin: AdminClient
) -> None:
    topic = new_topic("kip848", partitions=3)
    consumer = _member(kafka_bootstrap, group_id, topic, "consumer")
    try:

        def assigned() -> bool:
            consumer.poll(0.1)
            return _partitions(consumer) == {0, 1, 2}

        wait_until(assigned, 30, "an assignment through group.protocol=consumer")
        description = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
        # Only a broker implementing KIP-848 runs a group of type CONSUMER.
        assert description.type == ConsumerGroupType.CONSUMER
        assert {
            tp.partition
            for member in description.members
            for tp in member.assignment.topic_partitions
        } == {0, 1, 2}
    finally:
        consumer.close()


def test_redis_lua_script_round_trip(redis_client: redis.Redis, redis_prefix: str) -> None:
    # Atomically append to a list and return its new length and the sum of its numbers.
    script = redis_client.register_script(
        """
        redis.call('RPUSH', KEYS[1], ARGV[1])
        local total = 0
        for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do total = total + tonumber(v) end
        return {redis.call('LLEN', KEYS[1]), total}
        """
    )
    key = f"{redis_prefix}:numbers"
    assert script(keys=[key], args=[5]) == [1, 5]
    assert script(keys=[key], args=[7]) == [2, 12]
    # After Redis forgets its scripts, the registered script reloads itself by SHA.
    redis_client.script_flush()
    assert script(keys=[key], args=[30]) == [3, 42]
    assert redis_client.lrange(key, 0, -1) == [b"5", b"7", b"30"]
