"""The receiver's dead-letter producer after a fatal error: the letters it held fail
(DeadLetterFailed, so the messages are not committed past and come again), and the next
letters go through a new producer. Before, every later letter failed on the dead one.
Real Kafka; the dead-letter topic read back with read_committed."""

from __future__ import annotations

import pytest

from router.contract import BadInput, events, schemas
from router.receiver.letters import DeadLetterFailed, ReceiverLetters
from router.receiver.received import Received
from tests.fixtures.factories import TopicFactory
from tests.fixtures.inprocess import FencedProducer, read_to_end


def received(offset: int) -> Received:
    return Received("q", 0, offset, b"k", b"v%d" % offset, [], 1_700_000_000_000, None, False, None)


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
    letters._producer = FencedProducer(kafka_bootstrap, dlq, knows=fails_in == "produce")
    with pytest.raises(DeadLetterFailed, match="failed fatally"):
        letters.dead_letter(received(0), bad)  # fails here if the producer knows
        letters.flush()  # else here, in the transaction it never commits
    # The message comes again: its letter goes through a new producer.
    letters.dead_letter(received(0), bad)
    letters.dead_letter(received(1), bad)
    letters.flush()
    values = read_to_end(kafka_bootstrap, dlq)
    assert [schemas.decode(events.DEAD_LETTER, v)["value"] for v in values] == [b"v0", b"v1"]
