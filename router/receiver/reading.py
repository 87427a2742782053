"""How a `Receiver` (router.receiver.client) reads: its consumer's rebalance callbacks,
the records it hands out (bands, redelivery holds, lifetimes, segments reassembled),
whole groups gathered, what the application marks done or abandons, and the commit. A base class
of `Receiver`; it holds no state of its own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from router.backends.kafka.fatal import fatal_unmasked, reraise
from router.errors import InvalidRequest, TimedOut
from router.receiver import bandrestore
from router.receiver.bands import ReceiverBands
from router.receiver.reassembly import Reassembler, SegmentError, is_segment
from router.receiver.received import (
    Gatherer,
    OffsetTracker,
    Received,
    ReceivedGroup,
    from_message,
    offsets_of,
    token_of,
    usable,
)
from router.receiver.redelivery import Redeliveries
from router.receiver.traced import ReceiveSpans
from router.state.store import StatusStore

log = logging.getLogger("router.receiver")

# on_assign / on_revoke: called with the Receiver and the partitions
AnyHook = Callable[[Any, list[TopicPartition]], None]


class ReceiveTimeout(TimedOut):
    """No message arrived within the wait time."""


class Reading:
    """The consumer side of `Receiver`; the attributes are set by `Receiver.__init__`."""

    _consumer: Consumer
    _peek_config: dict[str, Any]
    _redo: Redeliveries
    _bands: ReceiverBands | None = None  # priority bands, if the queues have them
    _tracing: ReceiveSpans | None = None  # spans, if tracing is on (router.receiver.traced)
    _offsets: OffsetTracker
    _gather: Gatherer
    _segments: Reassembler
    _on_assign: AnyHook | None
    _on_revoke: AnyHook | None
    _status: StatusStore | None
    queues: list[str]
    received: int

    # ------------------------------------------------------------------ rebalancing

    def _assigned(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._redo.assigned(partitions)
        if self._bands is not None:  # a group handed out part way before: its band holds
            try:
                committed = self._consumer.committed(list(partitions), timeout=10)
            except KafkaException as exc:
                log.warning("could not read committed offsets to restore band holds: %s", exc)
            else:
                found = bandrestore.peek(self._peek_config, committed)
                self._bands.restore(bandrestore.open_groups(found, self._bands.bases))
        if self._on_assign is not None:
            self._on_assign(self, partitions)

    def _revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Before the partitions move: the application's hook (it may still mark messages
        done), then commit what is done, then forget them."""
        try:
            if self._on_revoke is not None:
                self._on_revoke(self, partitions)
            self.commit()
        except KafkaException as exc:  # the next owner reprocesses from the last commit
            log.warning("could not commit before partitions were revoked: %s", exc)
        finally:
            self._forget(partitions)

    def _lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Lost (the group moved on without us): no commit is possible, only the hook."""
        try:
            if self._on_revoke is not None:
                self._on_revoke(self, partitions)
        finally:
            self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._offsets.forget(key)
            self._gather.forget(key)
            self._segments.forget(key)
            self._redo.forget(key)
            if self._bands is not None:
                self._bands.forget(key)

    # ------------------------------------------------------------------ reading

    def _received(self, m: Message) -> Received | None:
        """The message to hand out; None if it was dead-lettered instead (done)."""
        message = from_message(m)
        bands = self._bands
        # A partition paused after a failure was rewound by `_redo`, which refuses what was
        # fetched of it meanwhile; the band hold must not seek it on, past the held record.
        if bands is not None and not self._redo.holding(message) and not bands.admit(message):
            return None  # another band while a group is handed out: read again after it
        token = None if is_segment(message) else message  # a segment's bytes are not kept
        self._offsets.received((message.topic, message.partition), message.offset, token)
        if not self._redo.admit(message):
            if bands is not None and not self._redo.holding(message):
                bands.done(message)  # accounted for (expired, dead-lettered): done here
            return None
        self.received += 1
        return message

    def poll(self, timeout: float) -> Received | None:
        """The next message, or None after `timeout` seconds; SegmentError for a
        segmented message that cannot be handed over whole."""
        deadline = time.monotonic() + timeout
        while True:
            ready = self._segments.pop(live=self._live)
            if ready is not None:
                return ready if self._tracing is None else self._tracing.handed(ready)
            self._redo.resume_due()
            if self._bands is not None:
                self._bands.before_poll(self._redo.held())
            try:  # a fatal error masked as SystemError: `router.backends.kafka.fatal`
                m = self._consumer.poll(max(deadline - time.monotonic(), 0))
            except SystemError as exc:
                reraise(exc)
            if m is None:
                self._segments.expire(time.monotonic())  # nothing waits: sets may time out
                if self._segments:
                    continue
                return None
            if usable(m) and (message := self._received(m)) is not None:
                self._segments.add(message, time.monotonic())
                if self._segments:
                    continue
            if time.monotonic() >= deadline:
                return None

    def _live(self, m: Received) -> bool:
        """Not made void by a rewind (`abandon`) since it was read."""
        return self._offsets.is_open((m.topic, m.partition), m.offset)

    def consume(self, num_messages: int = 500, timeout: float = 1.0) -> list[Received]:
        """Up to `num_messages` messages, in each partition's order: waits at most
        `timeout` seconds for the first, then takes what has already been fetched (an
        empty list if nothing came)."""
        if num_messages < 1:
            raise InvalidRequest("num_messages must be at least 1")
        first = self.poll(timeout)
        if first is None:
            return []
        batch = [first]
        if num_messages > 1:
            with fatal_unmasked():
                more = self._consumer.consume(num_messages - 1, 0)
            more.reverse()
            while more:  # let go of each record as it is taken: segments are large
                m = more.pop()
                if usable(m) and (r := self._received(m)) is not None:
                    self._segments.add(r, time.monotonic())
            live = self._live
            while len(batch) < num_messages:
                ready = self._segments.pop(errors=False, live=live)  # an error: next call
                if ready is None:
                    break
                batch.append(ready if self._tracing is None else self._tracing.handed(ready))
        return batch

    def receive(self, timeout: float) -> Received:
        """The next message; raises ReceiveTimeout if none arrives within `timeout` s."""
        message = self.poll(timeout)
        if message is None:
            raise ReceiveTimeout(f"no message on {', '.join(self.queues)} within {timeout}s")
        return message

    def receive_group(self, timeout: float, *, incomplete_after: float = 60.0) -> ReceivedGroup:
        """The next whole group (its members in order, up to its final), or an ordinary
        message on its own; raises ReceiveTimeout if none is ready within `timeout` s.

        Meant for groups sent with whole-group delivery, which arrive contiguously; a
        streamed group is gathered as its members arrive (other messages in between are
        returned first). A group with no new member for `incomplete_after` s is returned
        with `complete=False` (its final will not come: stopped, or dead-lettered), and
        so is the rest of it if it comes after all (its first sequence number is not 0).
        `timeout` 0 polls once without waiting."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            ready = self._gather.next_ready(now, incomplete_after)
            if ready is not None:
                return ready
            m = self.poll(max(min(deadline - now, 0.2), 0.0))  # at least once, even for 0
            if m is None:
                if time.monotonic() >= deadline:
                    queues = ", ".join(self.queues)
                    raise ReceiveTimeout(f"no whole group on {queues} within {timeout}s")
                continue
            single = self._gather.add(m, time.monotonic())
            if single is not None:
                return single

    def done(self, message: Received | ReceivedGroup | SegmentError) -> None:
        """Mark a message, or all of a group (or a SegmentError's records), processed:
        committed once every message received before it on its partition is done too."""
        members: tuple[Received, ...] = (
            (message,) if isinstance(message, Received) else message.messages
        )
        if self._status is not None:  # first: a status is never behind the commit
            self._status.record(members)
            self._redo.expiry.before_done(members)
        for m in members:
            if self._bands is not None:
                self._bands.done(m)  # a final ends its group's band hold
            for offset in offsets_of(m):  # a reassembled message: each segment's
                position = self._offsets.done((m.topic, m.partition), offset, token_of(m))
                if position is not None:
                    self._consumer.store_offsets(
                        offsets=[TopicPartition(m.topic, m.partition, position)]
                    )

    def abandon(self, message: Received | ReceivedGroup) -> None:
        """Give a message (or group) back undone: it, and all handed out after it on its
        partition (`done()` on those no longer counts), comes again before anything later;
        nothing is committed past it. At `max_deliveries` it is dead-lettered instead."""
        first = message if isinstance(message, Received) else message.messages[0]
        if self._bands is not None:  # its group holds the other bands again (a final too)
            self._bands.reopen(first)
        self._redo.abandon(message)

    nack = abandon

    def deliveries(self, message: Received) -> int:
        """How many times this message has been handed out, this time included."""
        return self._redo.deliveries(message)

    def commit(self) -> None:
        """Commit what has been marked done, now (synchronously)."""
        try:
            self._redo.committed(self._consumer.commit(asynchronous=False))
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise
