"""A unit's transactional producer left with no broker (librdkafka#5301) is retired (BROKEN)
and replaced, as after a fatal error, and the new one commits (tests/fixtures/nobroker.py
strands it: one Metadata answer naming no broker, then the connection closed)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.stack.localstack import LocalStack
from router.backends.kafka import clients
from router.backends.kafka.brokerwatch import NoBrokerWatch, watched
from router.config import KafkaSettings
from router.metrics.registry import Metrics
from router.unit.commit.session import TransactionalSession
from router.unit.commit.txnstate import TxnState
from tests.fixtures.helpers import unique
from tests.fixtures.nobroker import metadata_proxy, strand


def test_a_transactional_producer_with_no_broker_is_replaced(private_stack: LocalStack) -> None:
    topic = unique("nobroker-txn")
    admin = AdminClient({"bootstrap.servers": private_stack.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    with metadata_proxy(private_stack) as (proxy, bootstrap):
        kafka = KafkaSettings(bootstrap_servers=bootstrap, no_broker_replace_s=4)
        config = clients.transactional_producer_config(kafka, unique("txn"), "nobroker")
        watch = NoBrokerWatch(kafka.no_broker_replace_s)
        session = TransactionalSession(
            lambda: Producer(watched(config, watch)), threading.Event(), Metrics(), watch=watch
        )
        assert session.start() and session.state is TxnState.READY
        old = session.producer
        strand(proxy, watch, lambda: session.producer, topic, lambda: session.producer.poll(0))

        deadline = time.monotonic() + kafka.no_broker_replace_s + 10
        while session.state is TxnState.READY and time.monotonic() < deadline:
            session.poll()
            time.sleep(0.1)
        assert session.state is TxnState.BROKEN, "not retired"
        assert session.failure is not None and "librdkafka#5301" in session.failure

        deadline = time.monotonic() + 60
        while not session.replace() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert session.state is TxnState.READY and session.producer is not old
        p = session.producer
        p.begin_transaction()
        p.produce(topic, b"after")
        p.commit_transaction(30)
        assert watch.without_broker() is None  # the new producer names its broker
    admin.delete_topics([topic])
