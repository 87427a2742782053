"""A unit's source: its consumer, the partitions assigned to it, and where they resume.

Polling in batches, pausing and resuming, rewinding (seek) and reading the committed
offsets. Rebalance callbacks stay with the run loop, which must complete the batch in
flight before partitions move on; this class only keeps the assignment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable
from typing import NoReturn

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from router.backends.kafka.brokerwatch import NoBrokerWatch, watched
from router.backends.kafka.fatal import is_fatal, reraise, unmasked
from router.errors import RouterError
from router.metrics.registry import Metrics
from router.unit.batching import BatchSizer
from router.unit.stalls import StallGuard
from router.unit.steps.batch import TP

log = logging.getLogger("router.source")

PROBE_TIMEOUT_S = 1.0  # the stall guard's broker requests: short, the loop waits on them
LATEST, EARLIEST = -1, -2  # ListOffsets "timestamps": the last stable offset, the low watermark

Callback = Callable[[Consumer, list[TopicPartition]], None]


class FatalUnitError(RouterError, RuntimeError):
    """The unit cannot continue (a fatal consumer error, a rewind that failed): exit
    non-zero. Dying is safe: the group hands its partitions on from the committed offsets."""


def _size(m: Message) -> int:
    value = m.value()
    return len(value) if value else 0


def _collect(answers: Iterable[TopicPartition], into: dict[TP, int]) -> None:
    for tp in answers:
        if tp.error is None and tp.offset >= 0:
            into[(tp.topic, tp.partition)] = tp.offset


def tps(partitions: Iterable[TP]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in partitions]


class Source:
    def __init__(
        self,
        config: dict[str, object],
        batch_size: int,
        metrics: Metrics,
        max_bytes: int = 1 << 62,
        max_batch_size: int = 0,
        watch: NoBrokerWatch | None = None,
        cells: int = 1,
    ) -> None:
        """`watch`: the consumer's statistics go there; one that names no broker for its
        time (librdkafka#5301: it never reads again) is a fatal client error, the unit
        exits and its supervisor starts it again (the group moves its partitions).
        `cells`: the topology's (a partition's cell is its number modulo them); batches
        grow up to `max_batch_size` per cell of the partitions held (`BatchSizer.spread`)."""
        self.stalls = StallGuard()  # partitions not read for long though records wait
        self.watch = watch if watch is not None else NoBrokerWatch(0)
        self.consumer = Consumer(watched(config, self.watch))
        self.sizer = BatchSizer(batch_size, max_batch_size)
        self.cells = cells
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.assigned: set[TP] = set()
        self.full = False  # the last poll came back full: the local queue may hold more

    def stranded(self, now: float, skip: Collection[TP]) -> list[TP]:
        """Assigned partitions the unit has not read for long although records wait in
        them (`router.unit.stalls`), asked of the broker for the suspects (partitions not
        read for `after_s`, but those in `skip`): three requests (committed offsets, low
        watermarks, last stable offsets), whatever their number, and only while there are
        suspects."""
        guard = self.stalls
        suspects = guard.suspects(now, skip)
        if not suspects:
            return []
        asked = tps(suspects)
        starts: dict[TP, int] = {}
        lows: dict[TP, int] = {}
        stable: dict[TP, int] = {}
        try:
            _collect(self.consumer.committed(asked, timeout=PROBE_TIMEOUT_S), starts)
            for tp in self.consumer.position(asked):  # past a transaction's marker, if read
                key = (tp.topic, tp.partition)
                if tp.error is None and tp.offset >= 0:
                    starts[key] = max(starts.get(key, tp.offset), tp.offset)
            # nothing before the low watermark (deleted records) waits
            _collect(self._offsets([TopicPartition(t, p, EARLIEST) for t, p in suspects]), lows)
            _collect(self._offsets([TopicPartition(t, p, LATEST) for t, p in suspects]), stable)
        except KafkaException as exc:  # asked again shortly (`StallGuard.judge`)
            log.info("cannot tell yet whether %d unread partitions wait: %s", len(asked), exc)
        return guard.judge(suspects, starts, lows, stable, now)

    def _offsets(self, query: list[TopicPartition]) -> list[TopicPartition]:
        """ListOffsets for `query` (offsets: LATEST or EARLIEST); read_committed: LATEST
        is the last stable offset."""
        if not query:
            return []
        return list(self.consumer.offsets_for_times(query, timeout=PROBE_TIMEOUT_S))

    def reassign(self, partitions: list[TP], paused: bool, now: float) -> None:
        """Assign stranded partitions again: librdkafka then queries their committed
        offsets afresh. Nothing of them was consumed since they were assigned."""
        ps = tps(partitions)
        try:
            self.consumer.incremental_unassign(ps)
        except KafkaException as exc:  # not assigned any more (an earlier try failed half-way)
            log.warning("unassigning %d stranded partitions: %s", len(ps), exc)
        self.consumer.incremental_assign(ps)
        if paused:
            self.consumer.pause(ps)
        else:
            self.consumer.resume(ps)
        self.stalls.assigned(partitions, now)

    def subscribe(self, topics: list[str], on_assign: Callback, on_revoke: Callback) -> None:
        self.consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)

    def poll(self, timeout: float) -> list[Message]:
        """Wait up to `timeout` s for one message, then take whatever else is already
        fetched, up to the batch's size (`router.unit.batching`: `unit.batch_size`, more
        under a backlog) and (about) max_bytes of values: large records are taken a few at
        a time, by their average size so far. Messages of partitions revoked meanwhile are
        dropped. `full`: it stopped at the batch's size, not at an empty local queue
        (records fetched may wait there: `StallGuard.tick`)."""
        self._has_broker()
        try:  # a fatal error masked as SystemError: `router.backends.kafka.fatal`
            first = self.consumer.poll(timeout)
        except SystemError as exc:
            self.masked(exc)
        self.full = False
        if first is None:
            return []
        messages = [first]
        size = _size(first)
        count = self.sizer.target
        while len(messages) < count and size < self.max_bytes:
            want = count - len(messages)
            if size:
                want = min(want, max(1, (self.max_bytes - size) * len(messages) // size))
            try:
                more = self.consumer.consume(want, 0)
            except SystemError as exc:
                self.masked(exc)
            if not more:
                break
            messages.extend(more)
            size += sum(_size(m) for m in more)
        else:  # not emptied: records of any partition may wait in the local queue
            self.full = True
        self.sizer.after(len(messages))
        good = []
        assigned = self.assigned
        for m in messages:
            err = m.error()
            if err is None:
                if (m.topic(), m.partition()) in assigned:
                    good.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                self.error(err)
        if good:
            self.stalls.took({(m.topic(), m.partition()) for m in good}, time.monotonic())
        return good

    def drain_paused(self, timeout: float) -> None:
        """Poll while every partition is paused (so the group keeps us); anything already
        fetched is rewound rather than handled."""
        self._has_broker()
        try:
            m = self.consumer.poll(timeout)
        except SystemError as exc:
            self.masked(exc)
        if m is not None:
            if m.error() is None:
                self.seek(m.topic(), m.partition(), m.offset())
            else:
                self.error(m.error())

    def _has_broker(self) -> None:
        gone = self.watch.stuck()
        if gone is not None:
            raise FatalUnitError(f"the consumer had no broker for {gone:.0f} s (librdkafka#5301)")

    def masked(self, exc: SystemError) -> NoReturn:
        """A consumer call's SystemError: the fatal error it masks (`router.backends.kafka.fatal`)
        ends the unit as a fatal message error does; any other is raised as it is."""
        cause = unmasked(exc)
        if isinstance(cause, KafkaException) and is_fatal(cause):
            self.metrics.inc("kafka_errors")
            raise FatalUnitError(f"fatal consumer error: {cause.args[0]}") from None
        reraise(exc)

    def error(self, err: KafkaError) -> None:
        self.metrics.inc("kafka_errors")
        if err.fatal():
            raise FatalUnitError(f"fatal consumer error: {err}")
        log.warning("consumer error: %s", err)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        if (topic, partition) not in self.assigned:
            return  # revoked meanwhile: the next owner starts from the committed offset
        try:
            self.consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as exc:
            # Going on would commit past messages never forwarded.
            raise FatalUnitError(f"could not rewind {topic}[{partition}] to {offset}") from exc

    def pause(self, partitions: Iterable[TP]) -> None:
        if ps := tps(partitions):
            self.consumer.pause(ps)

    def resume(self, partitions: Iterable[TP]) -> None:
        """Let partitions the unit kept paused be read again (their stall delay starts
        over: `StallGuard.resumed`)."""
        if ps := tps(partitions):
            self.consumer.resume(ps)
            self.stalls.resumed(((tp.topic, tp.partition) for tp in ps), time.monotonic())

    def rewind_to_committed(self) -> bool:
        """Every assigned partition back to the group's committed offset. False if the
        coordinator does not answer yet, or a partition cannot be sought yet (the caller
        tries again, going on with none of them)."""
        assigned = tps(self.assigned)
        try:
            committed = self.consumer.committed(assigned, timeout=30) if assigned else []
        except KafkaException as exc:
            log.warning("cannot read the committed offsets yet: %s", exc)
            return False
        for tp in committed:
            if (tp.topic, tp.partition) not in self.assigned:
                continue  # revoked meanwhile: the next owner starts from the committed offset
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            try:
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
            except KafkaException as exc:
                # Right after a broker outage librdkafka may refuse a seek on a partition
                # it is not fetching yet (erroneous state): nothing goes on before every
                # partition is back at its committed offset, so try again later.
                log.warning("cannot rewind %s[%d] yet: %s", tp.topic, tp.partition, exc)
                return False
        log.warning("resuming %d partitions from their committed offsets", len(committed))
        return True

    def assign(self, partitions: list[TopicPartition], paused: bool) -> None:
        """Take newly assigned partitions (incremental protocols: KIP-848, cooperative-
        sticky). librdkafka keeps a partition's pause flag across losing and regaining
        it, so say explicitly what it should be."""
        for tp in partitions:
            self.assigned.add((tp.topic, tp.partition))
        self._spread()
        self.stalls.assigned([(tp.topic, tp.partition) for tp in partitions], time.monotonic())
        self.consumer.incremental_assign(partitions)
        if partitions:
            if paused:
                self.consumer.pause(partitions)
            else:
                self.consumer.resume(partitions)

    def revoke(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.assigned.discard((tp.topic, tp.partition))
        self._spread()
        self.stalls.revoked((tp.topic, tp.partition) for tp in partitions)

    def _spread(self) -> None:
        if self.cells > 1:
            self.sizer.spread(len({p % self.cells for _, p in self.assigned}))

    def group_metadata(self) -> object:
        return self.consumer.consumer_group_metadata()

    def close(self) -> None:
        self.consumer.close()  # leaves the consumer group now, not at session timeout
