"""Where a consumer stands on a partition it has read nothing of (`router.backends.kafka.starts`):
its committed offset (no lower than the partition's first), else the partition's first; asked
once, forgotten on reassignment.
Pure logic: a stand-in consumer."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from router.backends.kafka.starts import Starts


class Consumer:
    def __init__(self, committed: dict[tuple[str, int], int], low: int = 7) -> None:
        self.committed_at = committed
        self.low = low
        self.asked = 0
        self.down = False

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.asked += 1
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "away"))
        return [
            TopicPartition(
                t.topic, t.partition, self.committed_at.get((t.topic, t.partition), -1001)
            )
            for t in tps
        ]

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float, cached: bool
    ) -> tuple[int, int]:
        return self.low, 100


def test_the_committed_offset_else_the_first_asked_once_until_forgotten() -> None:
    c = Consumer({("room", 0): 42})
    starts = Starts()
    assert starts.of(c, [("room", 0), ("room", 1)]) == {("room", 0): 42, ("room", 1): 7}
    assert starts.of(c, [("room", 0)]) == {("room", 0): 42} and c.asked == 1
    c.committed_at[("room", 0)] = 50
    starts.forget([("room", 0)])
    assert starts.of(c, [("room", 0), ("room", 1)]) == {("room", 0): 50, ("room", 1): 7}
    assert c.asked == 2


def test_a_broker_that_cannot_say_leaves_the_partition_out_for_now() -> None:
    c = Consumer({("room", 0): 42})
    c.down = True
    starts = Starts(low=lambda tps: {tp: 3 for tp in tps})
    assert starts.of(c, [("room", 0)]) == {}
    c.down = False
    assert starts.of(c, [("room", 0), ("room", 1)]) == {("room", 0): 42, ("room", 1): 3}


def test_a_committed_offset_below_the_first_stands_at_the_first() -> None:
    # retention deleted the records up to past the committed offset: the consumer's fetch
    # is out of range and it resets to the earliest, so it stands at the partition's first
    # offset (a drain that took the committed one waited for it for good)
    c = Consumer({("room", 0): 42, ("room", 1): 5})
    starts = Starts(low=lambda tps: {tp: 50 for tp in tps})
    assert starts.of(c, [("room", 0), ("room", 1)]) == {("room", 0): 50, ("room", 1): 50}
    # the first offset unknown now (the broker cannot say): left out, asked again next time,
    # not kept at the committed offset for the whole assignment
    answers = [{}, {("room", 0): 50}]
    later = Starts(low=lambda tps: answers.pop(0))
    assert later.of(c, [("room", 0)]) == {}
    assert later.of(c, [("room", 0)]) == {("room", 0): 50}
