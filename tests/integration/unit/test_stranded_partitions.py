"""Stranded partitions (router.unit.stalls, Source.stranded and Source.reassign) against the
real broker. librdkafka's defect itself (issue #5586: an OffsetFetch failing as a whole
leaves a partition unfetched for good) cannot be provoked on demand, so a partition is
paused behind the guard's back instead: from the guard's side it looks the same, assigned
and never read. The guard must tell it from a partition it reads and from an idle one
whose last record is a transaction's marker, and assigning it again must read it from its
committed offset."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from router.metrics.registry import Metrics
from router.unit.source import Source
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until


def test_a_partition_never_read_though_records_wait_is_found_and_read_once_assigned_again(
    kafka_bootstrap: str, new_topic: TopicFactory, group_id: str
) -> None:
    topic = new_topic("strand", partitions=3)
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        plain.produce(topic, f"{i}".encode(), partition=1)
    plain.flush(30)
    txn = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique("strand")})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(10):
        txn.produce(topic, f"{i}".encode(), partition=0)
    for i in range(3):  # partition 2: offsets 0-2, the commit marker at 3
        txn.produce(topic, f"{i}".encode(), partition=2)
    txn.commit_transaction(30)
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id})
    committer.commit(  # partition 2 read to its end, as a unit commits it: up to the marker
        offsets=[TopicPartition(topic, p, o) for p, o in [(0, 4), (1, 6), (2, 3)]],
        asynchronous=False,
    )
    committer.close()
    source = Source(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "group.protocol": "consumer",  # the units' (KIP-848): incremental assignment
        },
        batch_size=100,
        metrics=Metrics(),
    )
    source.stalls.after_s = 1.0
    one, two = (topic, 1), (topic, 2)

    def on_assign(_c: Consumer, ps: list[TopicPartition]) -> None:
        source.assign(ps, paused=False)
        # partition 1's fetcher "never starts": paused before it fetched, the guard not told
        source.consumer.pause([tp for tp in ps if tp.partition == 1])

    source.subscribe([topic], on_assign=on_assign, on_revoke=lambda _c, ps: source.revoke(ps))
    got: list[tuple[int, int]] = []

    def read(n: int) -> bool:
        got.extend((m.partition(), m.offset()) for m in source.poll(0.2))
        return len(got) >= n

    found_at = [0.0]

    def judged(ask: Callable[[float], list[tuple[str, int]]], at: float) -> list[tuple[str, int]]:
        """The guard's verdict at `at`; on a loaded machine a broker request may time out
        (the guard then asks again `retry_s` later): asked again, later, a few times."""
        for attempt in range(6):
            found_at[0] = at + attempt * 2 * source.stalls.retry_s
            if out := ask(found_at[0]):
                return out
        return []

    def polled(condition: Callable[[], bool]) -> Callable[[], bool]:
        return lambda: read(0) and condition()

    try:
        wait_until(polled(lambda: len(source.assigned) == 3), 30, "assigned")
        wait_until(lambda: read(6), 30, "partition 0 from its committed offset")
        assert {p for p, _ in got} == {0}
        # partition 2's fetcher read its marker (the position passes it): idle, not stranded
        wait_until(
            polled(lambda: source.consumer.position([TopicPartition(topic, 2)])[0].offset == 4),
            30,
            "partition 2 fetched to its end",
        )
        later = time.monotonic() + source.stalls.after_s  # the guard's delay, passed
        assert source.stranded(later, skip={one}) == []  # the unit pauses it itself
        assert source.stalls.unconsumed == {one, two}
        found = judged(lambda at: source.stranded(at, skip=set()), later)
        assert found == [one]
        # asked about again only after the delay: the idle one as well
        assert source.stranded(found_at[0], skip=set()) == []
        source.reassign([one], paused=False, now=time.monotonic())
        got.clear()
        wait_until(lambda: read(4), 30, "partition 1, from its committed offset")
        assert sorted(o for p, o in got if p == 1) == [6, 7, 8, 9]
        assert source.stalls.unconsumed == {two}
        # read before, then its fetcher stops (paused behind the guard's back) while
        # records keep coming: stranded once unread for the delay
        zero = TopicPartition(topic, 0)
        source.consumer.pause([zero])
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, f"{i}".encode(), partition=0)
        txn.commit_transaction(30)
        # what a unit commits: everything it read, up to the marker
        source.consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
        later = found_at[0] + 2 * source.stalls.after_s
        assert judged(lambda at: source.stranded(at, skip=set()), later) == [(topic, 0)]
        source.reassign([(topic, 0)], paused=False, now=time.monotonic())
        got.clear()
        wait_until(lambda: read(3), 30, "partition 0's new records")
    finally:
        source.close()
    assert sorted(o for p, o in got if p == 0) == [11, 12, 13]
