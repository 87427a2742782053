"""End offsets of partitions, asked on a connection of their own.

Not a consumer's `get_watermark_offsets(tp, timeout)`: that ListOffsets request goes on
the consumer's connection to the partition leader, where the broker answers it only
after the consumer's fetch long-poll in flight (`fetch.wait.max.ms`, 500 ms by default),
so an idle consumer waited about 0.5 s per partition. An admin client has its own
connection, and one request carries every partition asked (about 1 ms on loopback).
The priority bands' paused partitions are asked here too (`router.unit.bandsource`,
`router.receiver.bands`): through the consumer, each ask cost a unit's loop up to half a
second, and a high-priority message fetched meanwhile waited for all of them (0.3 to
1.1 s per loop turn in the priority bench stage, whose short version failed a CI run).

After a failed answer the admin client is made again (at most once per `REMAKE_S`: during
a broker outage, a new client per request would only pile up threads). Its metadata names
each partition's
leader epoch, and librdkafka's admin ListOffsets does not refresh that metadata when the
broker refuses the epoch (FENCED_LEADER_EPOCH after a broker restart or a leader move):
every later request carried the old epoch until `metadata.max.age.ms` (15 min) passed.
A new client reads the metadata afresh.

A client's first ListOffsets for a topic comes after it described the topic
(`describe_topics`: one request for the topics it has not read yet, about 1 ms on loopback;
it never creates a topic, as a metadata request for one may). Without it, librdkafka looks
the leaders up itself, and with an empty metadata cache that lookup waited 1 or 3 s in
about one request in four (a loop of new admin clients against the local broker,
2026-11-30): every new unit paid it in its first batches, on the room partitions' starts
and ends. The two requests share one timeout: an ask takes at most about `timeout_s`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from router.backends.kafka.clients import dispose_in_background

log = logging.getLogger("router.endoffsets")

TP = tuple[str, int]

REMAKE_S = 5.0  # at least this long between two admin clients


class Watermarks(Protocol):
    """What the priority bands and the drain ask: partitions' ends (`__call__`) and starts
    (`starts`), those the broker cannot say now left out."""

    def __call__(self, tps: Iterable[TP]) -> dict[TP, int]: ...

    def starts(self, tps: Iterable[TP]) -> dict[TP, int]: ...

    def close(self) -> None: ...


class EndOffsets:
    """`ends(tps)`: each partition's end as a read_committed consumer sees it (the last
    stable offset: nothing of an open transaction), as the router's consumers' own
    watermark requests returned it; with `committed=False`, the high watermark. A
    partition the broker cannot say now (a leader moving; an answer without an offset) is
    left out of the answer: the caller asks again later (one warning per run of failures
    of a kind, ends or starts, then one line when that kind is answered again)."""

    def __init__(
        self, config: Mapping[str, Any], timeout_s: float = 10.0, *, committed: bool = True
    ) -> None:
        self._config = dict(config)
        self.timeout_s = timeout_s
        self._isolation = (
            IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        )
        self._admin: AdminClient | None = None  # made on first use: most units never ask
        self._made_at: float | None = None  # time.monotonic() when self._admin was made
        self._described: set[str] = set()  # topics whose metadata self._admin has read
        # per kind of ask ("end", "start"): answers in a row that left a partition out
        self.failures: dict[str, int] = {}

    def __call__(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._ask(tps, OffsetSpec.latest(), "end")

    def starts(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Each partition's first offset (its low watermark), as `__call__` its end."""
        return self._ask(tps, OffsetSpec.earliest(), "start")

    def _ask(self, tps: Iterable[TP], spec: OffsetSpec, what: str) -> dict[TP, int]:
        wanted = list(dict.fromkeys(tps))
        if not wanted:
            return {}
        if self._admin is None:
            self._admin = AdminClient(self._config)
            self._made_at = time.monotonic()
            self._described = set()
        began = time.monotonic()
        unread = self._describe(self._admin, {t for t, _ in wanted} - self._described)
        errors = [f"{t}[{p}]: metadata not read: {unread[t]}" for t, p in wanted if t in unread]
        wanted = [tp for tp in wanted if tp[0] not in unread]
        if not wanted:  # the broker away: one timeout per ask, as before
            self._failed(what, f"{what} offsets unknown ({'; '.join(errors)})")
            return {}
        left = max(self.timeout_s - (time.monotonic() - began), 0.1)  # one budget in all
        try:
            futures = self._admin.list_offsets(
                {TopicPartition(t, p): spec for t, p in wanted},
                isolation_level=self._isolation,
                request_timeout=left,
            )
        except KafkaException as exc:
            self._failed(what, f"{what} offsets of {len(wanted)} partitions unknown: {exc}")
            return {}
        out: dict[TP, int] = {}
        for tp, future in futures.items():
            try:
                # librdkafka's own request timeout ends the future first
                offset = int(future.result(timeout=left + 1).offset)
            except Exception as exc:  # KafkaException, or a future that timed out
                errors.append(f"{tp.topic}[{tp.partition}]: {exc!r}")
                continue
            if offset < 0:
                # Resolved without an error but with no offset (OFFSET_INVALID, -1001):
                # seen right after a broker was killed. Not an end: a drain would take
                # any position as past it (nor, asked for its start, a start).
                errors.append(f"{tp.topic}[{tp.partition}]: no offset ({offset})")
            else:
                out[(tp.topic, tp.partition)] = offset
        if errors:
            self._failed(what, f"{what} offsets unknown ({'; '.join(errors)})")
        elif what in self.failures:
            failed = self.failures.pop(what)
            log.info("%s offsets answered again after %d failed requests", what, failed)
        return out

    def _describe(self, admin: AdminClient, topics: set[str]) -> dict[str, str]:
        """Describe the `topics` that `admin` has not read yet, in one request (see above);
        what failed, by topic."""
        if not topics:
            return {}
        try:
            futures = admin.describe_topics(
                TopicCollection(sorted(topics)), request_timeout=self.timeout_s
            )
        except KafkaException as exc:
            return dict.fromkeys(topics, repr(exc))
        failed: dict[str, str] = {}
        for topic, future in futures.items():
            try:
                future.result(timeout=self.timeout_s + 1)
            except Exception as exc:  # KafkaException (an unknown topic), a time-out
                failed[topic] = repr(exc)
                continue
            self._described.add(topic)
        return failed

    def _failed(self, what: str, why: str) -> None:
        """Count a failed ask of its kind (`what`); drop the admin client if it is
        `REMAKE_S` old: the next request makes one with fresh metadata."""
        failed = self.failures.get(what, 0)
        if failed == 0:
            log.warning("%s; asking again later, on a new admin connection", why)
        else:
            log.debug("%s (failure %d in a row)", why, failed + 1)
        self.failures[what] = failed + 1
        if self._made_at is None or time.monotonic() - self._made_at >= REMAKE_S:
            self.close()

    def close(self) -> None:
        """Let the admin client go (destroyed on a daemon thread: `dispose_in_background`,
        a destroy after a broker restart has been seen to hang)."""
        if self._admin is not None:
            box: list[Any] = [self._admin]
            self._admin = self._made_at = None
            dispose_in_background(box)


__all__ = ["EndOffsets", "Watermarks"]
