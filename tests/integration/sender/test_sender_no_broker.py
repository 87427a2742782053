"""A Sender's producer left with no broker (librdkafka#5301) is replaced: what it held fails
with the reason, nothing of it is written, and the new producer delivers.

On the private stack, through a proxy that answers one Metadata request with no broker and
closes the connection (tests/fixtures/nobroker.py): the shape of a single KRaft broker's
answer at the end of its controlled shutdown, which left a chaos run's Sender producer with
787 messages and no broker for good."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.stack.localstack import LocalStack
from router.backends.kafka.brokerwatch import NoBrokerWatch, watched
from router.config.client import producer_config
from router.sender.delivery import Deliveries
from tests.fixtures.helpers import unique
from tests.fixtures.nobroker import metadata_proxy, strand

AFTER_S = 4.0


def end_offset(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("ends")})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()


def test_a_producer_with_no_broker_fails_what_it_holds_and_a_new_one_delivers(
    private_stack: LocalStack,
) -> None:
    topic = unique("nobroker")
    admin = AdminClient({"bootstrap.servers": private_stack.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    with metadata_proxy(private_stack) as (proxy, bootstrap):
        watch = NoBrokerWatch(AFTER_S)
        config = watched(producer_config({"bootstrap.servers": bootstrap}, "nobroker"), watch)
        out = Deliveries(lambda: Producer(config), threading.Lock(), watch)
        for i in range(20):
            out.produce((topic, 0), None, b"before-%d" % i, [], None)
        assert out.flush(30) == [] and out.delivered == 20

        tries = strand(proxy, watch, lambda: out.producer, topic, lambda: out.producer.poll(0))
        stranded = time.monotonic()
        assert out.replaced == 0
        for i in range(50):  # queued on a producer that will never deliver them
            out.produce((topic, 0), None, b"held-%d" % i, [], None)
        failures = out.flush(30)
        took = time.monotonic() - stranded

        assert out.replaced == 1, f"not replaced ({tries} tries to strand it)"
        assert len(failures) == 50 and out.delivered == 20, failures[:3]
        assert all("no broker" in f and "librdkafka#5301" in f for f in failures), failures[0]
        assert took < AFTER_S + 3 * watch.interval_ms / 1000 + 5, took

        for i in range(20):  # the new producer delivers
            out.produce((topic, 0), None, b"after-%d" % i, [], None)
        assert out.flush(30) == [] and out.delivered == 40
    # the held messages were never written: no duplicate when the caller sends them again
    assert end_offset(private_stack.bootstrap, topic) == 40
    admin.delete_topics([topic])
