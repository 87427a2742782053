"""A unit rewinds every partition to its committed offset before it goes on (after a failed
transaction). Right after a broker outage librdkafka may refuse a seek (erroneous state):
the rewind is then tried again later, never fatal and never partial."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from router.metrics.registry import Metrics
from router.unit.source import FatalUnitError, Source


class FakeConsumer:
    def __init__(self, refuse: int) -> None:
        self.refuse = refuse  # seeks refused before they are accepted
        self.sought: list[tuple[str, int, int]] = []

    def committed(self, tps: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, 7 if tp.partition == 0 else -1001) for tp in tps
        ]

    def seek(self, tp: TopicPartition) -> None:
        if self.refuse > 0:
            self.refuse -= 1
            raise KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))
        self.sought.append((tp.topic, tp.partition, tp.offset))

    def close(self) -> None:
        pass


def source(consumer: Any) -> Source:
    s = Source({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"}, 10, Metrics())
    s.consumer.close()
    s.consumer = consumer
    s.assigned = {("q", 0), ("q", 1)}
    return s


def test_a_refused_seek_is_tried_again_and_every_partition_rewound_then() -> None:
    fake = FakeConsumer(refuse=1)
    s = source(fake)
    assert s.rewind_to_committed() is False  # refused: the unit backs off, nothing goes on
    assert s.rewind_to_committed() is True
    assert sorted(fake.sought) == [("q", 0, 7), ("q", 1, OFFSET_BEGINNING)]


class MaskingConsumer(FakeConsumer):
    """A consumer whose fatal error confluent-kafka masks as a SystemError (a log line
    served after it in the same call: `router.backends.kafka.fatal`)."""

    def __init__(self) -> None:
        super().__init__(refuse=0)

    def poll(self, timeout: float = 0) -> None:
        fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced", fatal=True)
        raise SystemError("<class 'logging.LogRecord'> returned a result") from KafkaException(
            fenced
        )

    consume = poll


def test_a_fatal_consumer_error_masked_as_a_system_error_ends_the_unit_as_itself() -> None:
    s = source(MaskingConsumer())
    for call in (lambda: s.poll(0.1), lambda: s.drain_paused(0.1)):
        with pytest.raises(FatalUnitError, match=r"fatal consumer error: .*fenced"):
            call()
    assert s.metrics.counters["kafka_errors"] == 2


def test_a_system_error_that_masks_nothing_is_raised_as_it_is() -> None:
    class Broken(FakeConsumer):
        def poll(self, timeout: float = 0) -> None:
            raise SystemError("something else")

    with pytest.raises(SystemError, match="something else"):
        source(Broken(refuse=0)).poll(0.1)
