"""Naming partitions short of in-sync replicas (router/unit/commit/insync.py), from metadata shaped
like confluent-kafka's `list_topics` answer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from router.unit.commit.insync import ReplicaCheck, min_insync, shortages


def meta(**topics: list[tuple[int, list[int], list[int]]]) -> Any:
    """topic -> [(leader, replicas, isrs)] per partition."""
    return SimpleNamespace(
        topics={
            name: SimpleNamespace(
                partitions={
                    i: SimpleNamespace(id=i, leader=leader, replicas=reps, isrs=isrs)
                    for i, (leader, reps, isrs) in enumerate(parts)
                }
            )
            for name, parts in topics.items()
        }
    )


def test_the_minimum_follows_the_topic_creation_rule_unless_configured() -> None:
    assert (min_insync(3, None), min_insync(2, None), min_insync(1, None)) == (2, 1, 1)
    assert min_insync(3, 3) == 3


def test_short_and_leaderless_partitions_are_named_and_healthy_ones_are_not() -> None:
    m = meta(
        t=[(1, [1, 2, 3], [1, 2, 3]), (2, [1, 2, 3], [2]), (-1, [1, 2, 3], [])],
        single=[(1, [1], [1])],
        other=[(1, [1, 2, 3], [1])],
    )
    got = shortages(m, ["t", "single", "missing"], None)
    assert got == [
        "t[1] in-sync replicas [2] of [1, 2, 3], below min.insync.replicas=2",
        "t[2] has no leader (replicas [1, 2, 3])",
    ]
    two_of_three = meta(t=[(1, [1, 2, 3], [1, 2])])
    assert shortages(two_of_three, ["t"], None) == []
    assert shortages(two_of_three, ["t"], 3) == [
        "t[0] in-sync replicas [1, 2] of [1, 2, 3], below min.insync.replicas=3"
    ]


def test_the_check_asks_at_most_once_per_interval_and_survives_no_metadata() -> None:
    calls: list[float] = []
    answer: list[Any] = [meta(t=[(2, [1, 2, 3], [2])])]

    def list_topics(timeout: float) -> Any:
        calls.append(timeout)
        if isinstance(answer[0], Exception):
            raise answer[0]
        return answer[0]

    check = ReplicaCheck(list_topics, ["t"], None, every_s=3600, timeout_s=1.5)
    line = check.explain()
    assert line is not None and line.startswith("NOT_ENOUGH_REPLICAS:")
    assert "t[0] in-sync replicas [2]" in line
    assert check.explain() is None and calls == [1.5]  # within the interval: not asked
    check = ReplicaCheck(list_topics, ["t"], None, every_s=0)
    answer[0] = KafkaException(KafkaError(KafkaError._TRANSPORT))
    assert check.explain() is None
    answer[0] = meta(t=[(1, [1, 2, 3], [1, 2])])
    assert check.explain() is None  # nothing short
