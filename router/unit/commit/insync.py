"""Naming a shortage of in-sync replicas when a unit's transaction fails.

With acks=all (every producer of the project) a partition whose in-sync replicas are
fewer than its `min.insync.replicas` refuses writes: the broker answers
NOT_ENOUGH_REPLICAS, librdkafka retries it quietly until the transaction times out, and
the unit only sees a failed commit. So after a failure the unit reads the cluster's
metadata (at most every `every_s`) and names the partitions of its topology that are
short, or have no leader, in its back-off warning: an operator then knows it waits for a
broker to return, not for a bug. `min.insync.replicas` is the settings' value, else the
rule topics are created with (`router.topology.topics.replication`): 2 once a partition has three
replicas, else 1.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from confluent_kafka import KafkaException

log = logging.getLogger("router.insync")

SHOWN = 4  # partitions named in one line


def min_insync(replicas: int, configured: int | None) -> int:
    """The `min.insync.replicas` a topology's partition with `replicas` copies has."""
    return configured or (2 if replicas >= 3 else 1)


def shortages(metadata: Any, topics: Collection[str], configured: int | None) -> list[str]:
    """The partitions of `topics` that refuse acks=all writes, from a `list_topics`
    answer: no leader, or fewer in-sync replicas than their minimum."""
    out: list[str] = []
    for name in sorted(topics):
        topic = metadata.topics.get(name)
        if topic is None:
            continue
        for p in sorted(topic.partitions.values(), key=lambda p: p.id):
            need = min_insync(len(p.replicas), configured)
            if p.leader < 0:
                out.append(f"{name}[{p.id}] has no leader (replicas {sorted(p.replicas)})")
            elif len(p.isrs) < need:
                out.append(
                    f"{name}[{p.id}] in-sync replicas {sorted(p.isrs)} of "
                    f"{sorted(p.replicas)}, below min.insync.replicas={need}"
                )
    return out


def describe(short: list[str]) -> str:
    more = f" (+{len(short) - SHOWN} more)" if len(short) > SHOWN else ""
    return (
        "NOT_ENOUGH_REPLICAS: writes with acks=all are refused until a broker returns: "
        + "; ".join(short[:SHOWN])
        + more
    )


class ReplicaCheck:
    """Rate-limited: `explain()` returns a line naming the short partitions, or None
    (none short, metadata unavailable, or asked again within `every_s`)."""

    def __init__(
        self,
        list_topics: Callable[..., Any],
        topics: Collection[str],
        configured: int | None,
        every_s: float = 10.0,
        timeout_s: float = 2.0,
    ) -> None:
        self._list_topics = list_topics
        self.topics = frozenset(topics)
        self.configured = configured
        self.every_s = every_s
        self.timeout_s = timeout_s
        self._next: float | None = None  # monotonic; None: never asked

    def explain(self) -> str | None:
        now = time.monotonic()
        if self._next is not None and now < self._next:
            return None
        self._next = now + self.every_s
        try:
            metadata = self._list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            log.debug("no metadata to check replicas: %s", exc)
            return None
        short = shortages(metadata, self.topics, self.configured)
        return describe(short) if short else None
