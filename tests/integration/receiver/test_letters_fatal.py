"""The receiver's dead-letter producer after a fatal error: the letters it held fail
(DeadLetterFailed, so the messages are not committed past and come again), and the next
letters go through a new producer. Before, every later letter failed on the dead one.
Real Kafka; the dead-letter topic read back with read_committed."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from router.contract import BadInput, events, schemas
from router.receiver.letters import DeadLetterFailed, ReceiverLetters
from router.receiver.received import Received
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique


def received(offset: int) -> Received:
    return Received("q", 0, offset, b"k", b"v%d" % offset, [], 1_700_000_000_000, None, False, None)


def fenced(bootstrap: str, topic: str, knows: bool) -> Producer:
    """A transactional producer fenced by another of its ID, in a transaction. `knows`:
    it met the fence already (failed fatally: its next call fails with `_FATAL`); else
    it meets it on its next request to the broker, in a flush."""
    txn = {"bootstrap.servers": bootstrap, "transactional.id": unique("t")}
    p = Producer(txn)
    p.init_transactions(30)
    p.begin_transaction()
    Producer(txn).init_transactions(30)
    if knows:
        p.produce(topic, b"fenced")  # never committed
        with pytest.raises(KafkaException) as error:
            p.flush(10)
        assert error.value.args[0].fatal()
    return p


def committed(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("read"),
            "isolation.level": "read_committed",
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
                return out
            out.append(m.value())
    finally:
        c.close()


@pytest.mark.parametrize("fails_in", ["produce", "flush"])
def test_a_dead_letter_producer_that_failed_fatally_is_replaced(
    kafka_bootstrap: str, new_topic: TopicFactory, fails_in: str
) -> None:
    dlq = new_topic("dlq")
    letters = ReceiverLetters(
        {"bootstrap.servers": kafka_bootstrap},
        "receiver",
        dead_letter_topic=dlq,
        events_topic=None,
        topology="t",
        max_value_bytes=1_000_000,
    )
    bad = BadInput("max-deliveries", "handler failed 3 times")
    letters._producer = fenced(kafka_bootstrap, dlq, knows=fails_in == "produce")
    with pytest.raises(DeadLetterFailed, match="failed fatally"):
        letters.dead_letter(received(0), bad)  # fails here if the producer knows
        letters.flush()  # else here, in the transaction it never commits
    # The message comes again: its letter goes through a new producer.
    letters.dead_letter(received(0), bad)
    letters.dead_letter(received(1), bad)
    letters.flush()
    values = [v for v in committed(kafka_bootstrap, dlq)]
    assert [schemas.decode(events.DEAD_LETTER, v)["value"] for v in values] == [b"v0", b"v1"]
