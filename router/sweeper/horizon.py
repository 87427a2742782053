"""The sweeper's horizon: what an entry's TTL may count.

An entry's deadline (update time + TTL, on the Redis clock) passing proves nothing alone:
the router may have stopped routing (units stopped, the broker away) while the group's
next messages wait in Kafka. A side's *horizon* H is a time such that every record
written to the router before H has been routed by that side's units. An entry is swept
only if its deadline D is before both now and H: a later message of its group, if there
is one, was then written after D, so its sender was quiet for a whole TTL. An entry past
D but not before H stays, and is looked at again next round.

Send side: for every send-queue partition, the send units' committed offset; the
unconsumed records (committed offset to the end, pending and aborted transactional
records included: `read_uncommitted`) are read, and H is the oldest of their timestamps
(+inf if every partition is drained). All of them, not just the first: timestamps of one
partition need not be in offset order (several producers, retries).

Receive side: a message on its way may still be in a send queue or in the transfer
topic, so the transfer topic alone says nothing (it is drained while the send units are
stopped). Each round that reads the send horizon H_s also reads the transfer
partitions' end offsets E, after the send units' committed offsets: every record written
before H_s was forwarded (and committed) before that, so below E. Once the receive
units have consumed everything below E on every transfer partition (no committed record
between their committed offset and E: commit markers and aborted records do not count),
everything written before H_s has reached the receive side: H_s is a receive horizon
from then on. The receive
horizon is the largest such H_s of recent rounds. This needs no timestamp of the
transfer topic, which may be the senders' (CreateTime, kept when forwarding) or the
broker's append time.

Margins: a record is in the log only once its producer delivered it, so the horizon is
at most now - DELIVERY_SLACK_MS; and after the broker was unreachable (or when the
sweeper starts), senders may still hold records they could not deliver, so nothing is
swept until the broker has answered for RECOVERY_GRACE_MS. If the broker does not answer,
there is no horizon and nothing is swept (`HorizonUnknown`).

Clocks: entry times are the Redis server's clock, record timestamps the producers'
(CreateTime) or the broker's (LogAppendTime). A sender whose clock runs ahead of Redis by
more than the slack can have its group swept after a pause shorter than the TTL.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from router.backends.kafka import clients
from router.backends.kafka.offsets import TP, CommittedOffsets
from router.config.settings import RouterSettings
from router.errors import RouterError
from router.topology.side import side_spec

NEVER = -math.inf  # no record may be trusted to be routed: nothing is swept
ALWAYS = math.inf  # every source drained

# A record produced before an entry's deadline is expected in the log this much later.
DELIVERY_SLACK_MS = 5_000
# After an outage, senders reconnect (librdkafka backs off up to 10 s) and deliver what
# they held back; nothing is swept until the broker has answered this long.
RECOVERY_GRACE_MS = 15_000
# Unconsumed records read per partition and round; more means the units are behind.
SCAN_LIMIT = 10_000
# Past rounds whose send horizon may still become the receive horizon.
SNAPSHOTS = 64


class HorizonUnknown(RouterError):
    """No horizon this round (the reason says why): nothing may be swept."""


class _Unreachable(RouterError):
    pass


@dataclass(frozen=True, slots=True)
class Horizons:
    send: float  # ms, or NEVER / ALWAYS
    receive: float
    note: str = ""  # why a horizon is NEVER, if it is

    def of(self, side: str) -> float:
        return self.send if side == "send" else self.receive


@dataclass(frozen=True, slots=True)
class _Snapshot:
    send: float  # a round's send horizon
    ends: dict[TP, int]  # transfer partitions' end offsets, read after its committed offsets


class HorizonReader:
    """Computes both sides' horizons, one round at a time (used by the sweeper)."""

    def __init__(
        self,
        settings: RouterSettings,
        client_id: str,
        *,
        timeout: float = 10.0,
        delivery_slack_ms: int = DELIVERY_SLACK_MS,
        recovery_grace_ms: int = RECOVERY_GRACE_MS,
        scan_limit: int = SCAN_LIMIT,
    ) -> None:
        self._send = side_spec(settings, "send")
        self._receive = side_spec(settings, "receive")
        self.timeout = timeout
        self.delivery_slack_ms = delivery_slack_ms
        self.recovery_grace_ms = recovery_grace_ms
        self.scan_limit = scan_limit
        self._committed = CommittedOffsets(settings.kafka, client_id, stable=False)
        # Readers that never subscribe (never join a group) and never commit.
        self._consumer = self._reader(settings, client_id, "read_uncommitted")
        self._stable = self._reader(settings, client_id, "read_committed")
        self._snapshots: deque[_Snapshot] = deque(maxlen=SNAPSHOTS)
        self._outage = False  # the broker did not answer, and has not since
        self._back_since: int | None = None  # ms when it answered again

    def after_outage(self) -> None:
        """Behave as if the broker had just been unreachable (a sweeper starting does not
        know what senders still hold)."""
        self._outage = True
        self._back_since = None

    @staticmethod
    def _reader(settings: RouterSettings, client_id: str, isolation: str) -> Consumer:
        return Consumer(
            {
                **clients.admin_config(settings.kafka),
                "client.id": client_id,
                "group.id": f"{settings.topology.name}.sweeper-horizon",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "isolation.level": isolation,
            }
        )

    def close(self) -> None:
        self._consumer.close()
        self._stable.close()
        self._committed.close()

    def round(self, now_ms: int, floor: float | None) -> Horizons | None:
        """Both horizons as of `now_ms` (the Redis clock), or None if `floor` is None (no
        entry is due: only check that the broker answers). `floor` is the oldest deadline
        due on either side: a horizon at or below it sweeps nothing, so reading stops
        there. Raises HorizonUnknown."""
        try:
            send_parts = self._partitions(self._send.sources)
            transfer_parts = self._partitions(self._receive.sources)
        except (KafkaException, _Unreachable) as exc:
            self._failed()
            raise HorizonUnknown(f"the broker did not answer: {exc}") from exc
        if self._outage:
            self._outage = False
            self._back_since = now_ms
        if self._back_since is not None:
            back = now_ms - self._back_since
            if back < self.recovery_grace_ms:
                raise HorizonUnknown(
                    f"the broker answers again since {back} ms; waiting "
                    f"{self.recovery_grace_ms} ms for records senders held back"
                )
            self._back_since = None
        if floor is None:
            return None
        try:
            send, note = self._send_horizon(send_parts, now_ms, floor)
            ends = {
                tp: high
                for tp, (low, high) in self._watermarks(transfer_parts).items()
                if high > low
            }
            if send > NEVER:
                self._snapshots.append(_Snapshot(send, ends))
            reached = self._reached(transfer_parts, ends)
        except (KafkaException, _Unreachable) as exc:
            self._failed()
            raise HorizonUnknown(f"the broker did not answer: {exc}") from exc
        receive = max(
            (
                s.send
                for s in self._snapshots
                if all(reached.get(tp, -1) >= end for tp, end in s.ends.items())
            ),
            default=NEVER,
        )
        if receive == NEVER and send > NEVER:
            note = note or "the receive units have not yet consumed what the send units forwarded"
        return Horizons(send, receive, note)

    # ------------------------------------------------------------------ reading Kafka

    def _failed(self) -> None:
        self._outage = True
        self._back_since = None

    def _partitions(self, topics: Sequence[str]) -> list[TP]:
        out: list[TP] = []
        for topic in topics:
            meta = self._consumer.list_topics(topic, timeout=self.timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise _Unreachable(f"no metadata for {topic}: {meta.error if meta else None}")
            out += [(topic, p) for p in sorted(meta.partitions)]
        return out

    def _watermarks(self, parts: Sequence[TP]) -> dict[TP, tuple[int, int]]:
        out = {}
        for topic, p in parts:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=self.timeout, cached=False
            )
            out[(topic, p)] = (low, high)
        return out

    def _reached(self, parts: list[TP], ends: dict[TP, int]) -> dict[TP, int]:
        """How far the receive units got on each transfer partition: the offset of the
        first committed record at or after their committed offset, or where a
        `read_committed` reader ends (the last stable offset) if there is none. Not the
        committed offset itself: a transaction's commit marker follows its last record,
        and a unit never commits past it until the next record."""
        committed = self._committed.read(self._receive.group_id, parts, timeout=self.timeout)
        reached = {tp: committed[tp] for tp in parts if committed.get(tp, -1) >= ends.get(tp, 0)}
        start = [
            TopicPartition(t, p, committed.get((t, p), OFFSET_BEGINNING))
            for t, p in parts
            if (t, p) not in reached
        ]
        if not start:
            return reached
        deadline = time.monotonic() + self.timeout
        self._stable.assign(start)
        try:
            while len(reached) < len(parts):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Unreachable("transfer partitions not read to their stable end")
                for m in self._stable.consume(100, timeout=min(left, 1.0)):
                    tp = (m.topic(), m.partition())
                    err = m.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise _Unreachable(str(err))
                    reached.setdefault(tp, m.offset())  # a record, or the stable end
        finally:
            self._stable.unassign()
        return reached

    def _send_horizon(self, parts: list[TP], now_ms: int, floor: float) -> tuple[float, str]:
        """The oldest timestamp among records the send units have not committed, capped
        at now - slack; NEVER (with the reason) if it is at or below `floor`, or if a
        partition holds more than `scan_limit` of them."""
        committed = self._committed.read(self._send.group_id, parts, timeout=self.timeout)
        start = [TopicPartition(t, p, committed.get((t, p), OFFSET_BEGINNING)) for t, p in parts]
        oldest, note = self._scan(start, floor)
        return min(oldest, now_ms - self.delivery_slack_ms), note

    def _scan(self, start: list[TopicPartition], floor: float) -> tuple[float, str]:
        pending = {(tp.topic, tp.partition) for tp in start}
        read: dict[TP, int] = dict.fromkeys(pending, 0)
        oldest = ALWAYS
        deadline = time.monotonic() + self.timeout
        self._consumer.assign(start)
        try:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Unreachable(f"{sorted(pending)} not read to their end offsets")
                for m in self._consumer.consume(500, timeout=min(left, 1.0)):
                    tp = (m.topic(), m.partition())
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            pending.discard(tp)
                            continue
                        raise _Unreachable(str(err))
                    if tp not in pending:
                        continue  # appended after its end was reached: not needed
                    kind, ts = m.timestamp()
                    if kind == TIMESTAMP_NOT_AVAILABLE or ts < 0:
                        return NEVER, f"{tp[0]}/{tp[1]}@{m.offset()} has no timestamp"
                    oldest = min(oldest, ts)
                    if oldest <= floor:
                        return NEVER, f"unconsumed records from {oldest} ms on in {tp[0]}/{tp[1]}"
                    read[tp] += 1
                    if read[tp] >= self.scan_limit:
                        return NEVER, (
                            f"{tp[0]}/{tp[1]} has more than {self.scan_limit} unconsumed records"
                        )
        finally:
            self._consumer.unassign()
        return oldest, ""
