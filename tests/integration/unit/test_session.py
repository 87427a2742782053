"""The transactional session's state machine against the real broker (in-process)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from functools import partial
from typing import NoReturn

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from router.backends.kafka import clients, fatal
from router.config import KafkaSettings
from router.metrics.registry import Metrics
from router.unit.commit.session import TransactionalSession
from router.unit.commit.txnstate import TxnFailed, TxnState
from router.unit.steps.emit.records import Record
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique


def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    """Everything committed on partition 0, read to the end offset."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("read"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    try:
        while True:
            m = c.poll(10)
            assert m is not None, f"{topic} not read to its end"
            if m.error() is not None:
                return out  # end of partition: the last stable offset is the end
            out.append(m.value())
    finally:
        c.close()


@pytest.fixture
def parts(kafka_bootstrap: str) -> Iterator[tuple[KafkaSettings, str, Consumer]]:
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, transaction_timeout_ms=10_000)
    group = unique("session-group")
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    yield kafka, unique("txn"), consumer
    consumer.close()


def new_session(kafka: KafkaSettings, txn_id: str) -> TransactionalSession:
    config = clients.transactional_producer_config(kafka, txn_id, "test")
    return TransactionalSession(lambda: Producer(config), threading.Event(), Metrics())


def rec(topic: str, value: bytes) -> Record:
    return Record(topic, 0, None, value, None, 0, None)


def test_a_batch_commits_and_a_failed_one_is_aborted_and_makes_older_batches_stale(
    parts: tuple[KafkaSettings, str, Consumer], new_topic: TopicFactory
) -> None:
    kafka, txn_id, consumer = parts
    source = new_topic("src")
    dest = new_topic("dst", config={"max.message.bytes": "20000"})
    session = new_session(kafka, txn_id)
    assert session.state is TxnState.INIT
    assert session.start() and session.state is TxnState.READY

    # `after` (the unit's table releases) runs on the call thread once the commit
    # succeeded, before wait_committed returns; never after a failed commit.
    after: list[str] = []

    def released() -> None:
        after.append(threading.current_thread().name)

    assert session.begin(session.generation)
    session.produce([rec(dest, b"one"), rec(dest, b"two")])
    session.commit(
        [TopicPartition(source, 0, 2)], consumer.consumer_group_metadata(), None, released
    )
    assert session.committing
    session.wait_committed()
    assert session.state is TxnState.READY and session.generation == 0
    assert after == ["txn-call"]

    # A record the destination refuses (too large for it) fails the transaction.
    decided_before = session.generation
    assert session.begin(session.generation)
    session.produce([rec(dest, b"three"), rec(dest, os.urandom(60_000))])
    session.commit(
        [TopicPartition(source, 0, 4)], consumer.consumer_group_metadata(), None, released
    )
    with pytest.raises(TxnFailed):
        session.wait_committed()
    assert after == ["txn-call"], "released after a failed commit"
    assert session.state is TxnState.FAILED and session.generation == decided_before + 1
    assert session.abort() and session.state is TxnState.READY
    # A batch decided before the failure is stale: the session refuses to begin it.
    assert not session.begin(decided_before)
    assert session.state is TxnState.READY
    # librdkafka: the refused record left a gap in the partition's sequence numbers, so
    # the next transaction fails too (OUT_OF_ORDER_SEQUENCE_NUMBER, "requires epoch
    # bump"); its abort bumps the producer epoch and the one after commits. A unit sees
    # one more failed batch, rewinds it and replays it.
    for attempt in range(3):
        assert session.begin(session.generation)
        session.produce([rec(dest, b"four")])
        session.commit([TopicPartition(source, 0, 5)], consumer.consumer_group_metadata())
        try:
            session.wait_committed()
            break
        except TxnFailed:
            assert attempt == 0 and session.abort()
    assert session.state is TxnState.READY

    assert read_committed(kafka.bootstrap_servers, dest) == [b"one", b"two", b"four"]
    (offset,) = consumer.committed([TopicPartition(source, 0)], timeout=10)
    assert offset.offset == 5, "the failed batch's offsets were not committed"


def test_a_replacement_producer_fences_the_old_one(
    parts: tuple[KafkaSettings, str, Consumer], new_topic: TopicFactory
) -> None:
    kafka, txn_id, consumer = parts
    source, dest = new_topic("src"), new_topic("dst")
    session = new_session(kafka, txn_id)
    assert session.start()
    assert session.begin(session.generation)
    old = session.producer
    session.produce([rec(dest, b"in the old transaction")])
    # As if the call thread had given up on the producer: BROKEN, then replaced.
    session.state = TxnState.BROKEN
    assert session.replace() and session.state is TxnState.READY
    assert session.producer is not old
    with pytest.raises(Exception, match=r"(?i)fenc|abort|state"):
        old.commit_transaction(10)
    assert session.begin(session.generation)
    session.produce([rec(dest, b"new")])
    session.commit([TopicPartition(source, 0, 1)], consumer.consumer_group_metadata())
    session.wait_committed()
    assert read_committed(kafka.bootstrap_servers, dest) == [b"new"]


def test_transitions_outside_the_machine_are_refused(
    parts: tuple[KafkaSettings, str, Consumer],
) -> None:
    kafka, txn_id, _ = parts
    session = new_session(kafka, txn_id)
    with pytest.raises(RuntimeError, match="init -> committing"):
        session.commit([], None)


def test_a_producer_that_keeps_failing_is_retired_and_replaced(
    parts: tuple[KafkaSettings, str, Consumer], new_topic: TopicFactory
) -> None:
    """FAILED -> BROKEN on the unit's word (`retire`: its transactions keep failing), then
    a new producer under the same transactional ID, which commits."""
    kafka, txn_id, consumer = parts
    source = new_topic("src")
    dest = new_topic("dst", config={"max.message.bytes": "20000"})
    session = new_session(kafka, txn_id)
    assert session.start()
    old = session.producer
    assert session.begin(session.generation)
    session.produce([rec(dest, os.urandom(60_000))])  # refused by the destination
    session.commit([TopicPartition(source, 0, 1)], consumer.consumer_group_metadata())
    with pytest.raises(TxnFailed):
        session.wait_committed()
    generation = session.generation
    session.retire("3 transactions failed in a row")
    assert session.state is TxnState.BROKEN and session.generation == generation + 1
    assert not session.abort()  # BROKEN: only a replacement helps
    assert session.replace() and session.state is TxnState.READY
    assert session.producer is not old
    assert session.begin(session.generation)
    session.produce([rec(dest, b"after")])
    session.commit([TopicPartition(source, 0, 1)], consumer.consumer_group_metadata())
    session.wait_committed()
    assert read_committed(kafka.bootstrap_servers, dest) == [b"after"]


def test_a_fenced_producer_whose_flush_goes_on_logging_is_replaced_not_crashed(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A band barrier's flush that meets the producer's fatal error (fenced) and then
    serves log lines to the clients' logger: confluent-kafka masks the error as a
    SystemError (`router.backends.kafka.fatal`), which killed a send unit in a chaos run.
    The transaction fails instead, BROKEN, and a new producer commits. The mask comes in
    most tries, not all: up to 5 tries, until one was masked."""
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, transaction_timeout_ms=10_000)
    source, dest = new_topic("src"), new_topic("dst")
    masked: list[bool] = []
    reraise = fatal.reraise

    def spy(exc: SystemError) -> NoReturn:
        masked.append(isinstance(exc.__cause__, KafkaException))
        reraise(exc)

    monkeypatch.setattr(fatal, "reraise", spy)
    caplog.set_level(logging.DEBUG, logger=clients.LIBRDKAFKA_LOGGER.name)
    tries = 0
    while tries < 5 and not any(masked):
        tries += 1
        config = clients.transactional_producer_config(kafka, unique("txn"), "test")
        # Nothing sent before the flush (linger), and a log line in every call: the
        # metadata of a topic that does not exist, asked every 100 ms, keeps a record
        # queued and the flush going past the fatal error.
        logging_config = {
            **config,
            "linger.ms": 1000,
            "debug": "metadata,topic",
            "topic.metadata.refresh.interval.ms": 100,
            "allow.auto.create.topics": False,
        }
        session = TransactionalSession(
            partial(Producer, logging_config), threading.Event(), Metrics()
        )
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique("g")})
        try:
            assert session.start() and session.begin(session.generation)
            session.produce([rec(dest, b"before the fence")])
            assert session.producer.flush(10) == 0
            fencer = Producer(config)  # the same transactional ID: the session's is fenced
            fencer.init_transactions(30)
            records = [rec(unique("missing"), b"queued")]
            records += [rec(dest, b"%d" % i) for i in range(20)]
            with pytest.raises(TxnFailed, match=r"(?i)fenc"):
                session.produce([*records, rec(dest, b"after")], barriers=[len(records)])
            assert session.state is TxnState.BROKEN
            assert session.replace() and session.state is TxnState.READY  # fences the fencer
            del fencer
            assert session.begin(session.generation)
            session.produce([rec(dest, b"after")])
            session.commit([TopicPartition(source, 0, 1)], consumer.consumer_group_metadata())
            session.wait_committed()
        finally:
            consumer.close()
            session.close()
    assert any(masked), "the fatal error was never masked: the test did not test the mask"
    assert read_committed(kafka.bootstrap_servers, dest) == [b"after"] * tries


class FirstCommitTimesOut(Producer):  # type: ignore[misc]
    """A real producer whose first commit_transaction gets no time at all: librdkafka
    answers `_TIMED_OUT` (retriable, "retry call to resume") while its EndTxn is on the
    way, the timed-out request that transactions v2 would fence and librdkafka cannot."""

    commits = 0

    def commit_transaction(self, *args: float) -> None:
        type(self).commits += 1
        super().commit_transaction(0.0 if type(self).commits == 1 else args[0])


def test_a_commit_that_timed_out_has_its_producer_replaced_before_the_next_transaction(
    parts: tuple[KafkaSettings, str, Consumer], new_topic: TopicFactory
) -> None:
    """librdkafka has no KIP-890: a request that timed out may land in the next transaction
    of the same epoch. A commit that succeeded only on its retry leaves the producer
    suspect; the next `begin` swaps it for a new one (epoch bumped, the old one fenced)."""
    kafka, txn_id, consumer = parts
    source, dest = new_topic("src"), new_topic("dst")
    config = clients.transactional_producer_config(kafka, txn_id, "test")
    metrics = Metrics()
    made: list[Producer] = []

    def new_producer() -> Producer:
        made.append(FirstCommitTimesOut(config) if not made else Producer(config))
        return made[-1]

    session = TransactionalSession(new_producer, threading.Event(), metrics)
    assert session.start()
    assert session.begin(session.generation)
    session.produce([rec(dest, b"one")])
    session.commit([TopicPartition(source, 0, 1)], consumer.consumer_group_metadata())
    session.wait_committed()  # the retry committed it
    assert FirstCommitTimesOut.commits == 2, "the first commit did not time out"
    assert session.state is TxnState.READY and session.suspect is not None
    assert "_TIMED_OUT" in session.suspect

    assert session.begin(session.generation)  # on a new producer
    assert len(made) == 2 and session.producer is made[1] and session.suspect is None
    assert metrics.get("producer_restarts") == 1
    session.produce([rec(dest, b"two")])
    session.commit([TopicPartition(source, 0, 2)], consumer.consumer_group_metadata())
    session.wait_committed()

    old = made[0]  # fenced: whatever it still sends cannot land in a transaction
    with pytest.raises(Exception, match=r"(?i)fenc|epoch|state"):
        old.begin_transaction()
        old.produce(dest, b"from the old epoch", partition=0)
        old.commit_transaction(10)
    assert read_committed(kafka.bootstrap_servers, dest) == [b"one", b"two"]
    (offset,) = consumer.committed([TopicPartition(source, 0)], timeout=10)
    assert offset.offset == 2
