"""A receiver that takes a banded queue over in the middle of a higher-band group holds the
queue's other bands until the group's final (router/receiver/bandrestore.py), on the real broker.

The records are written straight to the receive queue's band topics, as the router would
have (an ordinary record in band 0, then a group in band 2); a first receiver hands out
the group's first member, marks it done and closes; a second one, same group.id, must not
hand out the older band-0 record before the group's final.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from router import contract
from router.contract import priority
from router.receiver import Receiver
from tests.fixtures.helpers import unique, wait_until

BANDS = 3


@pytest.fixture
def queue(admin: AdminClient) -> Iterator[str]:
    base = unique("restore") + ".recv.1"
    names = priority.band_topics(base, BANDS)
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=1, replication_factor=1) for n in names]
    )
    for f in futures.values():
        f.result(timeout=30)
    wait_until(lambda: set(names) <= set(admin.list_topics(timeout=10).topics), 30, "topics")
    yield base
    for f in admin.delete_topics(names, operation_timeout=30).values():
        f.result(timeout=30)


def member(seq: int, final: bool = False) -> list[tuple[str, bytes]]:
    return [
        (contract.GUARANTEE_ID, b"g"),
        (contract.SEQ, str(seq).encode()),
        (contract.FINAL, b"true" if final else b"false"),
    ]


def test_a_receiver_taking_over_mid_group_holds_the_other_bands(
    kafka_bootstrap: str, queue: str
) -> None:
    high = priority.band_topic(queue, 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(queue, b"o0")  # older, band 0: passed over for band 2
    producer.produce(high, b"g0", headers=member(0))
    assert producer.flush(30) == 0
    config = {"bootstrap.servers": kafka_bootstrap, "group.id": unique("restore-rx")}

    with Receiver(config, queues=[queue], assign=True) as first:
        got = first.receive(30)
        assert got.value == b"g0", got
        first.done(got)
        # the group is open: band 0 waits, so nothing more comes for a while
        assert first.poll(2.0) is None

    with Receiver(config, queues=[queue], assign=True) as second:
        handed = []
        # g is still open: the older band-0 record must not come now ...
        m = second.poll(3.0)
        if m is not None:
            handed.append(m.value)
            second.done(m)
        producer.produce(high, b"g1", headers=member(1, final=True))
        assert producer.flush(30) == 0
        # ... but once g's final was handed out
        deadline = 60
        while len(handed) < 2 and deadline > 0:
            deadline -= 1
            m = second.poll(0.5)
            if m is not None:
                handed.append(m.value)
                second.done(m)
        assert handed == [b"g1", b"o0"], "the older band-0 record came inside group g"
