"""A priority band holding a transaction left open (its producer killed mid-batch) no
longer takes the units' turns from the bands below it, on the real broker.

The partition's cached high watermark (what librdkafka's fetch responses give) is past the
open transaction's records, which a `read_committed` consumer cannot read until the
transaction ends. Before, `router.unit.bandsource` counted them as a backlog: band 2 took
every turn but band 0's minimum share, reading nothing, until the transaction was fenced
or timed out. Now its end is capped by the last stable offset the broker gives
(`router.contract.bandends`). Judged from the turns taken and the records read."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from router.backends.kafka.endoffsets import EndOffsets
from router.contract.priority import band_topic
from router.metrics.registry import Metrics
from router.unit.bandsource import BandSource
from tests.fixtures.factories import TopicFactory

LOW = 3_000  # band 0's backlog: more than the turns below read
BATCH = 50


def test_a_band_with_a_transaction_left_open_does_not_starve_the_bands_below(
    kafka_bootstrap: str, admin: AdminClient, new_topic: TopicFactory
) -> None:
    base = new_topic("bandtxn")
    high = band_topic(base, 2)
    admin.create_topics([NewTopic(high, num_partitions=1, replication_factor=1)])[high].result(30)
    try:
        plain = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
        for i in range(LOW):
            plain.produce(base, f"low-{i}".encode(), partition=0)
        plain.flush(30)
        txn = Producer(
            {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"bt-{uuid.uuid4().hex}"}
        )
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(3):
            txn.produce(high, f"high-{i}".encode(), partition=0)
        txn.commit_transaction(30)
        txn.begin_transaction()  # left open: its producer "dies" here
        for i in range(4):
            txn.produce(high, f"open-{i}".encode(), partition=0)
        txn.flush(30)

        consumer = Consumer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "group.id": f"bt-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        tps = [(base, 0), (high, 0)]
        consumer.assign([TopicPartition(t, p, 0) for t, p in tps])
        ends = EndOffsets({"bootstrap.servers": kafka_bootstrap}, 2.0)
        bands = BandSource(consumer, [base], 3, 0.1, Metrics(), ends=ends)
        read: dict[str, list[bytes]] = {base: [], high: []}
        turns = []  # (seconds since the start, the turn) while band 0 still had a backlog
        start = time.monotonic()
        while time.monotonic() - start < 20 and len(read[base]) < LOW:
            turn = bands.before_poll(tps, [])
            turns.append((time.monotonic() - start, turn))
            for m in consumer.consume(BATCH, 0.2):
                if m.error() is None:
                    read[m.topic()].append(m.value())
        consumer.close()
        ends.close()
    finally:
        txn.abort_transaction(30)
        admin.delete_topics([high])

    assert read[high] == [b"high-0", b"high-1", b"high-2"]  # nothing of the open one
    # Band 0 got turns of its own, outside its minimum share, while band 2's transaction
    # stayed open (before: every such turn was band 2's alone, and it read nothing).
    own = [at for at, t in turns if 0 in t.bands and not t.share]
    assert own, [t for _, t in turns[:30]]
    late = [t for at, t in turns if at > own[0]]
    assert sum(0 in t.bands for t in late) >= 0.9 * len(late), late[:30]
    assert len(read[base]) == LOW, f"band 0 read {len(read[base])} of {LOW} in 20 s"
