"""The receiver library: read receive queues with `read_committed`, commit after processing.

`receive(timeout)` returns the next message or raises `ReceiveTimeout`; `done(message)`
marks it processed. `receive_group(timeout)` returns a whole group at once (or an
ordinary message on its own), for groups sent with whole-group delivery; `done(group)`
marks all of it processed. Only processed messages' offsets are committed (stored
offsets, committed every second and on close), and never past a message received but not
yet done (`OffsetTracker`), so a receiver that crashes reprocesses what it had not
finished, never skips it. `process(handler)` is the loop: receive, handle, done.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from router import clients, contract
from router.config import RouterSettings

log = logging.getLogger("router.receiver")


class ReceiveTimeout(TimeoutError):
    """No message arrived within the wait time."""


@dataclass(frozen=True, slots=True)
class Received:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int | None
    guarantee_id: str | None
    final: bool
    seq: int | None

    @property
    def grouped(self) -> bool:
        return self.guarantee_id is not None


@dataclass(frozen=True, slots=True)
class ReceivedGroup:
    """A group's messages in order (one ordinary message: `guarantee_id` None). `complete`:
    its final is among them; an incomplete one was returned after `incomplete_after`
    seconds without a new member (its final never came: see docs/routing.md)."""

    guarantee_id: str | None
    messages: tuple[Received, ...]
    complete: bool

    @property
    def values(self) -> list[bytes | None]:
        return [m.value for m in self.messages]


class OffsetTracker:
    """Per partition, the offsets received and not yet done (pure). The offset to commit
    is the lowest of them, or one past the highest received: never past a message the
    application has not finished, whatever order it finishes them in."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, int], dict[int, None]] = {}  # ascending (insertion)
        self._next: dict[tuple[str, int], int] = {}

    def received(self, tp: tuple[str, int], offset: int) -> None:
        self._open.setdefault(tp, {})[offset] = None
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def done(self, tp: tuple[str, int], offset: int) -> int | None:
        """Mark one offset done; the partition's commit offset if it moved, else None."""
        pending = self._open.get(tp)
        if pending is None or offset not in pending:
            return None
        was_lowest = next(iter(pending)) == offset
        del pending[offset]
        if not was_lowest:
            return None
        return next(iter(pending)) if pending else self._next[tp]

    def forget(self, tp: tuple[str, int]) -> None:
        """The partition was revoked: another receiver takes it from the commit offset."""
        self._open.pop(tp, None)
        self._next.pop(tp, None)


def _routing(headers: list[tuple[str, bytes | None]]) -> tuple[str | None, bool, int | None]:
    """The routing headers, read leniently (the router validated them already)."""
    gid: str | None = None
    final = False
    seq: int | None = None
    for k, v in headers:
        if v is None:
            continue
        if k == contract.GUARANTEE_ID:
            gid = v.decode("utf-8", "replace")
        elif k == contract.FINAL:
            final = v in (b"true", b"1", b"True", b"TRUE")
        elif k == contract.SEQ and v.isdigit():
            seq = int(v)
    return gid, final, seq


class Receiver:
    def __init__(
        self,
        settings: RouterSettings,
        queues: Sequence[str] | None = None,
        *,
        group_id: str,
        client_id: str | None = None,
        assign: bool = False,
    ) -> None:
        """Read `queues` (default: every receive queue of the topology) as consumer group
        `group_id`. `assign=True` reads every partition from the committed offset without
        joining a group (a checker reading all queues)."""
        self.queues = list(queues or settings.topology.receive_queues)
        config: dict[str, Any] = {
            **settings.kafka.common(),
            "group.id": group_id,
            "client.id": client_id or f"receiver-{clients.instance_id()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "auto.commit.interval.ms": 1000,
            "auto.offset.reset": "earliest",
            "logger": clients.LIBRDKAFKA_LOGGER,
        }
        self._consumer = Consumer(config)
        if assign:
            meta = self._consumer.list_topics(timeout=30).topics
            self._consumer.assign(
                [TopicPartition(q, p) for q in self.queues for p in meta[q].partitions]
            )
        else:
            self._consumer.subscribe(self.queues, on_revoke=self._revoked, on_lost=self._revoked)
        self.received = 0
        self._offsets = OffsetTracker()
        self._open: dict[tuple[str, int, str], tuple[list[Received], float]] = {}
        self._ready: deque[ReceivedGroup] = deque()

    def _revoked(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._offsets.forget(key)
            for k in [k for k in self._open if k[:2] == key]:
                del self._open[k]  # another receiver reads them again from the commit
            kept = [g for g in self._ready if (g.messages[0].topic, g.messages[0].partition) != key]
            self._ready = deque(kept)

    def poll(self, timeout: float) -> Received | None:
        """The next message, or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            m = self._consumer.poll(max(deadline - time.monotonic(), 0))
            if m is None:
                return None
            err = m.error()
            if err is None:
                break
            if err.fatal():
                raise KafkaException(err)
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", err)
            if time.monotonic() >= deadline:
                return None
        try:
            headers = contract.read_headers(m) or []
        except contract.BadInput as bad:
            log.warning(
                "%s[%d]@%d: %s; delivered without headers",
                m.topic(),
                m.partition(),
                m.offset(),
                bad,
            )
            headers = []
        gid, final, seq = _routing(headers)
        ts_type, ts = m.timestamp()
        self.received += 1
        self._offsets.received((m.topic(), m.partition()), m.offset())
        return Received(
            m.topic(),
            m.partition(),
            m.offset(),
            m.key(),
            m.value(),
            headers,
            ts if ts_type else None,
            gid,
            final,
            seq,
        )

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
            if self._ready:
                return self._ready.popleft()
            for key, (members, last) in list(self._open.items()):
                if now - last >= incomplete_after:
                    del self._open[key]
                    log.warning(
                        "group %r incomplete after %.0f s: returned as it is", key[2], now - last
                    )
                    return ReceivedGroup(key[2], tuple(members), False)
            m = self.poll(max(min(deadline - now, 0.2), 0.0))  # at least once, even for 0
            if m is None:
                if time.monotonic() >= deadline:
                    queues = ", ".join(self.queues)
                    raise ReceiveTimeout(f"no whole group on {queues} within {timeout}s")
                continue
            if m.guarantee_id is None:
                return ReceivedGroup(None, (m,), True)
            key = (m.topic, m.partition, m.guarantee_id)
            members, _ = self._open.get(key, ([], now))
            members.append(m)
            if m.final:
                self._open.pop(key, None)
                # a tail whose head was returned incomplete is not a whole group either
                whole = members[0].seq in (None, 0)
                self._ready.append(ReceivedGroup(m.guarantee_id, tuple(members), whole))
            else:
                self._open[key] = (members, time.monotonic())

    def done(self, message: Received | ReceivedGroup) -> None:
        """Mark a message, or all of a group, processed: committed once every message
        received before it on its partition is done too."""
        for m in message.messages if isinstance(message, ReceivedGroup) else (message,):
            position = self._offsets.done((m.topic, m.partition), m.offset)
            if position is not None:
                self._consumer.store_offsets(
                    offsets=[TopicPartition(m.topic, m.partition, position)]
                )

    def commit(self) -> None:
        """Commit what has been marked done, now (synchronously)."""
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def process(
        self,
        handler: Callable[[Received], None],
        *,
        idle_timeout: float | None = 5.0,
        max_messages: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Receive, handle, mark done; until nothing arrived for `idle_timeout` s (None:
        never), `max_messages` were handled, or `stop()` is true. Returns the count."""
        handled = 0
        last = time.monotonic()
        while max_messages is None or handled < max_messages:
            if stop is not None and stop():
                break
            message = self.poll(0.2)
            if message is None:
                if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                    break
                continue
            last = time.monotonic()
            handler(message)
            self.done(message)
            handled += 1
        return handled

    def close(self) -> None:
        self.commit()
        self._consumer.close()
