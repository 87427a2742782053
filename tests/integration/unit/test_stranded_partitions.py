"""A stranded partition assigned again (router.unit.stalls, Source.reassign) against the
real broker: the fetcher starts from the committed offset, and a partition the unit keeps
paused stays paused. librdkafka's defect itself (issue #5586: an OffsetFetch failing as a
whole leaves the partition unfetched for good) cannot be provoked on demand; the guard's
detection is unit-tested on its statistics (tests/unit/unit/test_stalls.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from router.metrics.registry import Metrics
from router.unit.source import Source
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import wait_until


def test_a_partition_assigned_again_reads_from_its_committed_offset_and_keeps_its_pause(
    kafka_bootstrap: str, new_topic: TopicFactory, group_id: str
) -> None:
    topic = new_topic("strand", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(20):
        producer.produce(topic, f"{i}".encode(), partition=i % 2)
    producer.flush(30)
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id})
    committer.commit(
        offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 6)], asynchronous=False
    )
    committer.close()
    source = Source(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "statistics.interval.ms": 200,
            "group.protocol": "consumer",  # the units' (KIP-848): incremental assignment
        },
        batch_size=100,
        metrics=Metrics(),
    )

    def pause_one() -> bool:
        source.consumer.pause([TopicPartition(topic, 1)])
        return True

    source.subscribe(
        [topic],
        on_assign=lambda _c, ps: source.assign(ps, paused=False),
        on_revoke=lambda _c, ps: source.revoke(ps),
    )
    got: list[tuple[int, int]] = []

    def read(n: int) -> bool:
        """Poll (callbacks and statistics are served there); True once `n` were read."""
        got.extend((m.partition(), m.offset()) for m in source.poll(0.2))
        return len(got) >= n

    def polled(condition: Callable[[], bool]) -> Callable[[], bool]:
        return lambda: read(0) and condition()

    try:
        # paused at once, partition 1 reads nothing (as a band the unit holds back)
        wait_until(polled(lambda: len(source.assigned) == 2 and pause_one()), 30, "assigned")
        wait_until(lambda: read(6), 30, "partition 0 from its committed offset")
        wait_until(
            polled(
                lambda: not source.stranded(time.monotonic()) and len(source.stalls.states) == 2
            ),
            30,
            "statistics",
        )
        assert set(source.stalls.states.values()) == {"active"}  # paused or not
        assert source.stranded(time.monotonic()) == []
        source.reassign([(topic, 0), (topic, 1)], paused=False, now=time.monotonic())
        pause_one()
        got.clear()
        wait_until(lambda: read(6), 30, "partition 0 again, from its committed offset")
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # partition 1 is paused: nothing of it may come
            read(0)
        assert source.stalls.unconsumed == {(topic, 1)}  # nothing of it consumed since
    finally:
        source.close()
    zero = sorted(o for p, o in got if p == 0)
    assert zero[:6] == [4, 5, 6, 7, 8, 9]  # read again from the committed offset 4
    assert not [o for p, o in got if p == 1]
