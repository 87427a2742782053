"""A unit's consumer left with no broker (librdkafka#5301) is a fatal client error once it
has named none for kafka.no_broker_replace_s: the unit exits (code 2) and is started
again, instead of reading nothing for good (tests/fixtures/nobroker.py strands it)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.stack.localstack import LocalStack
from router.backends.kafka.brokerwatch import NoBrokerWatch
from router.backends.kafka.clients import dispose_in_background
from router.metrics.registry import Metrics
from router.unit.source import FatalUnitError, Source
from tests.fixtures.helpers import unique
from tests.fixtures.nobroker import metadata_proxy, strand


def test_a_consumer_with_no_broker_stops_the_unit(private_stack: LocalStack) -> None:
    topic = unique("nobroker-src")
    admin = AdminClient({"bootstrap.servers": private_stack.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": private_stack.bootstrap})
    for i in range(10):
        p.produce(topic, b"%d" % i)
    assert p.flush(30) == 0
    with metadata_proxy(private_stack) as (proxy, bootstrap):
        watch = NoBrokerWatch(4.0)
        config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": unique("nobroker-group"),
            "auto.offset.reset": "earliest",
        }
        source = Source(config, 10, Metrics(), watch=watch)
        source.subscribe([topic], lambda c, ps: source.assigned.update(
            (t.topic, t.partition) for t in ps
        ), lambda c, ps: None)  # fmt: skip
        deadline = time.monotonic() + 30
        read: list[object] = []
        while len(read) < 10 and time.monotonic() < deadline:
            read += source.poll(0.2)
        assert len(read) == 10, "the consumer did not read through the proxy"

        strand(proxy, watch, lambda: source.consumer, topic, lambda: source.consumer.poll(0.05))
        deadline = time.monotonic() + watch.after_s + 10
        with pytest.raises(FatalUnitError, match=r"no broker .*librdkafka#5301"):
            while time.monotonic() < deadline:
                source.poll(0.2)
        dispose_in_background([source.__dict__.pop("consumer")])
    admin.delete_topics([topic])
