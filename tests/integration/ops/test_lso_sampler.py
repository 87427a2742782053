"""The LSO sampler against the real broker: a transaction's records become visible to
read_committed readers only once it has committed, and the sampler sees that after
`commit_transaction` returned (what the capacity rule's visibility bound rests on:
ops.harness.verdict.visibility)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer, TopicPartition

from ops.harness.traffic.visibility import LsoSampler
from router.config import KafkaSettings
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import wait_until


def test_the_sampler_sees_a_transaction_only_after_its_commit_returned(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = new_topic("lso")
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"lso-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    sampler = LsoSampler(
        KafkaSettings(bootstrap_servers=kafka_bootstrap), {"q": TopicPartition(topic, 0)}, 0.02
    )
    sampler.start()
    try:
        returned = []
        for round_ in range(3):
            producer.begin_transaction()
            for i in range(5):
                producer.produce(topic, f"{round_}-{i}".encode())
            producer.flush(30)
            base = sampler.rounds
            wait_until(lambda b=base: sampler.rounds >= b + 5, 30, "five rounds while open")
            # open: none of this transaction's offsets is visible yet
            assert sampler.visibility().at("q", round_ * 6) is None
            producer.commit_transaction(30)
            returned.append(int(time.time() * 1000))
            # 5 records and the commit marker per transaction
            wait_until(
                lambda r=round_: sampler.visibility().at("q", r * 6 + 4) is not None,
                30,
                "the committed records seen visible",
            )
    finally:
        sampler.stop()
    v = sampler.visibility()
    assert sampler.rounds > 15 and sampler.failed == 0
    for round_, at in enumerate(returned):
        first, last = v.at("q", round_ * 6), v.at("q", round_ * 6 + 4)
        assert first == last  # one transaction: visible at once
        # seen after the commit returned (clock read after the answer, and the markers
        # are written after the coordinator's EndTxn answer)
        assert first is not None and first >= at - 1, (first, at)
    assert v.at("q", 3 * 6) is None  # nothing beyond
