"""End offsets of partitions, asked on a connection of their own.

Not a consumer's `get_watermark_offsets(tp, timeout)`: that ListOffsets request goes on
the consumer's connection to the partition leader, where the broker answers it only
after the consumer's fetch long-poll in flight (`fetch.wait.max.ms`, 500 ms by default),
so an idle consumer waited about 0.5 s per partition. An admin client has its own
connection, and one request carries every partition asked (about 1 ms on loopback).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

log = logging.getLogger("router.endoffsets")

TP = tuple[str, int]


class EndOffsets:
    """`ends(tps)`: each partition's end as a read_committed consumer sees it (the last
    stable offset: nothing of an open transaction), as the router's consumers' own
    watermark requests returned it. A partition the broker cannot say now (a leader
    moving) is left out of the answer: the caller asks again later."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 10.0) -> None:
        self._config = dict(config)
        self.timeout_s = timeout_s
        self._admin: AdminClient | None = None  # made on first use: most units never ask

    def __call__(self, tps: Iterable[TP]) -> dict[TP, int]:
        wanted = list(dict.fromkeys(tps))
        if not wanted:
            return {}
        if self._admin is None:
            self._admin = AdminClient(self._config)
        try:
            futures = self._admin.list_offsets(
                {TopicPartition(t, p): OffsetSpec.latest() for t, p in wanted},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=self.timeout_s,
            )
        except KafkaException as exc:
            log.warning(
                "end offsets of %d partitions unknown, asked again later: %s", len(wanted), exc
            )
            return {}
        out: dict[TP, int] = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(future.result(timeout=self.timeout_s).offset)
            except Exception as exc:  # KafkaException, or a future that timed out
                log.warning(
                    "end offset of %s[%d] unknown, asked again later: %s",
                    tp.topic,
                    tp.partition,
                    exc,
                )
        return out


__all__ = ["EndOffsets"]
