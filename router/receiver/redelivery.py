"""The receiver's abandon, redelivery and delivery limit (`router.receiver.redelivery_rules` has the
rules).

`Receiver.abandon(message)` -> `Redeliveries.abandon`: one more failed delivery is counted
(`router.receiver.deliverycounts`), the partition's commit offset is kept at or below the message
(`OffsetTracker.rewind`: what was handed out after it is void, and `done()` on it no
longer counts), and the consumer seeks back to it, so it and everything after it come
again, in order, ahead of anything later. At the limit the message is dead-lettered
instead (`router.receiver.letters`; flushed before its offset is stored for the commit)
and the consumer seeks past it. `admit` judges each message read before it is handed
out: skipped if its dead letter was written already, dead-lettered if its group was
stopped or its count reached the limit before a restart, expired (`router.receiver.expiry`:
its ExpiredMessage event flushed first) if its lifetime ended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from router.backends.kafka import clients
from router.errors import ConfigError
from router.receiver import redelivery_rules as rules
from router.receiver.deliverycounts import Counts, DeliveryCounts, MemoryCounts
from router.receiver.expiry import ReceiverExpiry
from router.receiver.expiry_rules import ExpiryOptions
from router.receiver.letters import ReceiverLetters, group_stopped_reason, max_deliveries_reason
from router.receiver.received import (
    Gatherer,
    OffsetTracker,
    Received,
    ReceivedGroup,
    offsets_of,
    token_of,
)
from router.receiver.redelivery_rules import TP, Ledger, RedeliveryOptions
from router.state.store import StatusStore

log = logging.getLogger("router.receiver")

CommitHook = Callable[[Any, list[TopicPartition]], None]
PAUSE_S = (1.0, 30.0)  # a partition paused after a failure: first, longest


class Redeliveries:
    """A receiver's redeliveries, made before its consumer (whose `on_commit` it is), and
    bound to it by `bind`."""

    def __init__(
        self,
        config: Mapping[str, Any],
        client_id: str,
        topology: str | None,
        queues: Sequence[str] | None,
        status: StatusStore | None,
        prefix: str,
        max_deliveries: int | None,
        options: RedeliveryOptions | None,
        expiry: ExpiryOptions | None = None,
    ) -> None:
        """`config`, `client_id`: the receiver's; `topology` or `queues`: what it reads
        (the topics' names); `status`: its group statuses' store, whose Redis keeps the
        counts too (else they are kept in this process only); `expiry`: lifetimes are
        checked (None: not; nor without an events topic to report them, logged)."""
        self.max_deliveries = rules.check_max_deliveries(max_deliveries)
        self.options = o = options or RedeliveryOptions()
        group_id = str(config.get("group.id") or "")
        self.counts: Counts = (
            MemoryCounts()
            if status is None
            else DeliveryCounts(status.client, group_id, prefix, o.count_ttl_s)
        )
        self.ledger = Ledger(self.max_deliveries)
        self._unloaded: set[TP] = set()
        self._held: dict[TP, tuple[float, int]] = {}  # paused: (until, offset read again)
        self._backoff: dict[TP, float] = {}
        self._reading: set[TP] = set()  # read from since assigned
        self._user_on_commit: CommitHook | None = config.get("on_commit")
        name = rules.topology_of(topology, queues or ())
        self._letters = ReceiverLetters(
            {"logger": clients.LIBRDKAFKA_LOGGER, **config},
            client_id,
            dead_letter_topic=o.dead_letter_topic or (f"{name}.dlq" if name else None),
            events_topic=o.events_topic or (f"{name}.events" if name else None),
            topology=name or "",
            max_value_bytes=o.max_value_bytes,
        )
        if self.max_deliveries and self._letters.dead_letter_topic is None:
            raise ConfigError(
                f"max_deliveries={self.max_deliveries} needs a dead-letter topic: the queues "
                f"{list(queues or ())} are not <name>.recv.<n>; give the topology's name, or "
                "RedeliveryOptions(dead_letter_topic=...), or max_deliveries=None"
            )
        if expiry is not None and self._letters.events_topic is None:
            log.warning("no events topic for %s: lifetimes are not checked", list(queues or ()))
            expiry = None
        self.expiry = ReceiverExpiry(expiry, self._letters, self.counts, self.ledger, status)
        self._consumer: Any = None
        self._offsets = OffsetTracker()
        self._gather = Gatherer()

    def bind(self, consumer: Any, offsets: OffsetTracker, gather: Gatherer) -> None:
        """The receiver's consumer and bookkeeping."""
        self._consumer, self._offsets, self._gather = consumer, offsets, gather
        self.expiry.gather, self.expiry.offsets = gather, offsets

    def on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """librdkafka's commit report: committed offsets let the counts of messages now
        behind them go; then the application's own `on_commit`, if its config had one."""
        if err is None:
            self.committed(partitions)
        if self._user_on_commit is not None:
            self._user_on_commit(err, partitions)

    def committed(self, partitions: list[TopicPartition] | None) -> None:
        """Offsets Kafka committed (a synchronous commit's result: librdkafka reports
        only automatic and asynchronous ones)."""
        for p in partitions or []:
            if p.error is None:
                self.ledger.committed((p.topic, p.partition), p.offset)

    # ------------------------------------------------------------------ partitions

    def assigned(self, partitions: list[TopicPartition]) -> None:
        """Loaded the first time a message of one of them is read (not inside the
        rebalance callback: Redis may be slow), all together."""
        self._unloaded.update((p.topic, p.partition) for p in partitions)

    def forget(self, tp: TP) -> None:
        self.ledger.forget(tp)
        self._unloaded.discard(tp)
        self._held.pop(tp, None)
        self._backoff.pop(tp, None)
        self._reading.discard(tp)
        self.expiry.forget(tp)

    def _load(self, tp: TP) -> None:
        if self.ledger.loaded(tp):
            return
        tps = sorted(self._unloaded | {tp})
        for part, fields in self.counts.load(tps).items():
            self.ledger.load(part, fields)
        self._unloaded.clear()

    def deliveries(self, m: Received) -> int:
        """How many times the message was handed out, this time included (as far as the
        counts know: since `count_ttl_s` after the last abandon on its partition)."""
        return self.ledger.failed((m.topic, m.partition), m.offset) + 1

    # ------------------------------------------------------------------ reading

    def held(self) -> set[TP]:
        """The partitions paused after a failure (only `resume_due` resumes them)."""
        return set(self._held)

    def holding(self, m: Received) -> bool:
        """Whether `m`'s partition is paused after a failure (`admit` refuses `m`: its
        partition is read again from the held offset once the pause is over)."""
        return (m.topic, m.partition) in self._held

    def admit(self, m: Received) -> bool:
        """Whether to hand `m` out; if not, it was accounted for (and marked done), or it
        comes again: Redis or the dead-letter topic failed (logged; its partition is
        read again from it after a pause of 1 s, doubling up to 30 s)."""
        tp = (m.topic, m.partition)
        held = self._held.get(tp)
        if held is not None:  # fetched before its partition was paused: it comes again
            self._offsets.rewind(tp, held[1])
            # and is read again from the held offset, whoever resumed the partition
            self._consumer.seek(TopicPartition(*tp, held[1]))
            self._consumer.pause([TopicPartition(*tp)])
            return False
        if tp not in self._reading:  # the first read since it was assigned: from the
            self._reading.add(tp)  # committed offset, so nothing below it comes again
            self.ledger.committed(tp, m.offset)
        try:
            handed = self._judge(tp, m)
        except Exception as exc:
            self._hold(tp, m.offset, exc)
            return False
        self._backoff.pop(tp, None)
        return handed

    def _hold(self, tp: TP, offset: int, exc: Exception) -> None:
        wait = min(self._backoff.get(tp, PAUSE_S[0] / 2) * 2, PAUSE_S[1])
        self._backoff[tp] = wait
        log.error("%s[%d]@%d: %s; read again in %.0f s", *tp, offset, exc, wait, exc_info=exc)
        self._rewind(tp, offset)
        self._consumer.pause([TopicPartition(*tp)])
        self._held[tp] = (time.monotonic() + wait, offset)

    def resume_due(self) -> None:
        """Resume the partitions paused after a failure whose pause is over."""
        if not self._held:
            return
        now = time.monotonic()
        due = [tp for tp, (until, _) in self._held.items() if until <= now]
        if due:
            self._consumer.resume([TopicPartition(*tp) for tp in due])
            for tp in due:
                del self._held[tp]

    def _judge(self, tp: TP, m: Received) -> bool:
        self._load(tp)
        verdict = self.ledger.verdict(tp, m.offset, m.guarantee_id)
        if verdict == rules.DELIVER:
            if not self.expiry.expired(tp, m):
                return True
        elif verdict == rules.SKIP:
            log.info("%s[%d]@%d was dead-lettered or expired already: skipped", *tp, m.offset)
        elif verdict == rules.LIMIT:
            self._dead_letter(tp, (m,), self.ledger.failed(tp, m.offset))
        else:
            self._stopped_member(tp, m)
        self._mark_done(m)
        return False

    def _stopped_member(self, tp: TP, m: Received) -> None:
        gid = m.guarantee_id or ""
        stop, _ = self.ledger.stopped(tp, gid) or (m.offset, m.offset)
        letters = self._letters
        letters.dead_letter(m, group_stopped_reason(m, stop))
        letters.flush()
        if m.final:  # the group is over: its final is dead-lettered, the stop removed
            self.counts.settle(tp, [m.offset], unstop=gid)
            self.ledger.dead_lettered(tp, [m.offset])
            self.ledger.unstop(tp, gid)
        else:
            self.counts.settle(tp, [], stop=(gid, stop, m.offset))
            self.ledger.stop(tp, gid, stop, m.offset)

    def _mark_done(self, m: Received) -> None:
        tp = (m.topic, m.partition)
        for offset in offsets_of(m):
            position = self._offsets.done(tp, offset, token_of(m))
            if position is not None:
                self._consumer.store_offsets(offsets=[TopicPartition(*tp, position)])

    # ------------------------------------------------------------------ abandoning

    def abandon(self, unit: Received | ReceivedGroup) -> None:
        """`unit` and everything after it on its partition come again, first; at the
        limit it is dead-lettered instead and the rest comes again."""
        members = unit.messages if isinstance(unit, ReceivedGroup) else (unit,)
        if not members:
            return
        first = members[0]
        tp, offset = (first.topic, first.partition), first.offset
        if not self._offsets.knows(tp):  # revoked: counted for whoever reads it next
            self.counts.add(tp, offset)
            log.info("abandoned %s[%d]@%d after its partition moved", *tp, offset)
            return
        if not self._offsets.is_open(tp, offset, token_of(first)):
            log.info("abandon(%s[%d]@%d) ignored: done, or void already", *tp, offset)
            return
        self._load(tp)
        failed = self.counts.add(tp, offset, self.ledger.stale(tp))
        self.ledger.counted(tp, offset, failed)
        if not rules.at_limit(failed, self.max_deliveries):
            log.info("abandoned %s[%d]@%d (%d failed): read again from there", *tp, offset, failed)
            self._rewind(tp, offset)
            return
        try:
            self._dead_letter(tp, members, failed)
        except Exception:
            self._rewind(tp, offset)  # not dead-lettered: it comes again
            raise
        # Read on after it: what was handed out after it comes again (the group's other
        # members and a reassembled message's other records are skipped then: recorded).
        self._rewind(tp, offset + 1)
        self._mark_done(first)

    def _rewind(self, tp: TP, offset: int) -> None:
        """Read the partition again from `offset`. The seek comes first: if it fails,
        what was handed out stays open, so no commit passes it (it comes again after a
        restart or a rebalance), and the error goes to the caller."""
        self._consumer.seek(TopicPartition(*tp, offset))
        self._offsets.rewind(tp, offset)
        self._gather.rewind(tp, offset, time.monotonic())

    def _dead_letter(self, tp: TP, members: Sequence[Received], failed: int) -> None:
        """`members` (one message, or a group handed out whole) dead-lettered with reason
        max-deliveries, flushed, then recorded; under stop-group an unfinished group is
        stopped (a GroupStopped event; its later members are dead-lettered as read)."""
        letters = self._letters
        first, last = members[0], members[-1]
        for m in members:
            letters.dead_letter(m, max_deliveries_reason(m, failed))
        stop: tuple[str, int, int] | None = None
        gid = first.guarantee_id
        policy = rules.poison_policy(first.headers, self.options)
        if gid is not None and not last.final and policy == "stop-group":
            letters.group_stopped(first, max_deliveries_reason(first, failed))
            stop = (gid, last.offset, last.offset)
        letters.flush()
        dead = [o for m in members for o in offsets_of(m)]
        self.counts.settle(tp, dead, stop=stop)
        self.ledger.dead_lettered(tp, dead)
        if stop is not None:
            self.ledger.stop(tp, *stop)
