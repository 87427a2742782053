"""Bad routing headers never stop a unit and are never dropped: they are dead-lettered."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from ops.harness.stack.pipeline import PipelineSpec
from router.contract import schemas
from router.contract.events import DEAD_LETTER
from router.receiver import Receiver
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until


def test_bad_final_flag_is_dead_lettered_and_the_unit_keeps_going(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(
        PipelineSpec(
            send_units=1, receive_units=1, sweepers=0, transfer_partitions=2, receive_queues=2
        )
    )
    s = p.settings
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    queue = s.topology.send_queues[0]
    producer.produce(
        queue,
        b"bad",
        key=b"k",
        partition=0,
        headers=[("guarantee-id", b"g"), ("guarantee-final", b"maybe")],
    )
    producer.produce(queue, b"good", partition=0, headers=[("guarantee-id", b"g")])
    producer.flush(10)

    receiver = Receiver.from_settings(s, group_id=unique("check"), assign=True)
    assert receiver.receive(60).value == b"good"
    receiver.close()

    consumer = Consumer(
        {
            "bootstrap.servers": s.kafka.bootstrap_servers,
            "group.id": unique("dlq"),
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(s.topology.dead_letter_topic, 0, 0)])
    records = []

    def got_one() -> bool:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            records.append(schemas.decode(DEAD_LETTER, m.value()))
        return bool(records)

    wait_until(got_one, 30, "the dead letter")
    consumer.close()
    dead = records[0]
    assert dead["reason_code"] == "bad-final-flag" and "maybe" in dead["reason"]
    assert dead["value"] == b"bad" and dead["key"] == b"k"
    assert (dead["source_topic"], dead["source_partition"], dead["source_offset"]) == (queue, 0, 0)
    assert {"key": "guarantee-final", "value": b"maybe"} in dead["headers"]
    assert dead["side"] == "SEND"
