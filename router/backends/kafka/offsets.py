"""A consumer group's committed offsets, read without the AdminClient.

librdkafka's AdminClient can abort the whole process (`rd_kafka_enq_once_del_source_return:
Assertion 'eonce->refcnt > 0' failed`) when the coordinator connection drops during a
coordinator request such as ListConsumerGroupOffsets (librdkafka#4605 and #3663, open; fix
proposed in #5397). Seen here: the sweeper died of it while the chaos run restarted the
broker. A plain consumer's `committed()` asks the same coordinator (OffsetFetch) through the
consumer's own code path, which rides out broker restarts. The consumer never subscribes,
so it never joins the group it reads; with `read_committed` it asks for stable offsets
(KIP-447), as `require_stable=True` did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from router.backends.kafka import clients
from router.config.settings import KafkaSettings

TP = tuple[str, int]


class CommittedOffsets:
    """Reads committed offsets of any number of groups (one idle consumer per group)."""

    def __init__(
        self,
        kafka: KafkaSettings | Mapping[str, Any],
        client_id: str,
        *,
        stable: bool = True,
    ) -> None:
        """`kafka`: the settings, or a librdkafka dict of connection properties.
        `stable`: wait while a transaction that commits offsets is pending (KIP-447),
        so the answer says whether those offsets committed (the sweeper needs that). Off,
        the last committed offsets come back at once (estimates: backlog, benchmarks)."""
        self._base = (
            clients.admin_config(kafka) if isinstance(kafka, KafkaSettings) else dict(kafka)
        )
        self._client_id = client_id
        self._isolation = "read_committed" if stable else "read_uncommitted"
        self._consumers: dict[str, Consumer] = {}

    def read(
        self, group: str, partitions: Sequence[TopicPartition | TP], timeout: float
    ) -> dict[TP, int]:
        """Committed offset per partition; partitions with none are left out. Raises
        KafkaException if the coordinator does not answer within `timeout`."""
        consumer = self._consumers.get(group)
        if consumer is None:
            consumer = self._consumers[group] = Consumer(
                {
                    **self._base,
                    "client.id": self._client_id,
                    "group.id": group,
                    "enable.auto.commit": False,
                    "isolation.level": self._isolation,
                }
            )
        tps = [tp if isinstance(tp, TopicPartition) else TopicPartition(*tp) for tp in partitions]
        result = consumer.committed(tps, timeout=timeout)
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result
            if tp.error is None and tp.offset >= 0
        }

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
