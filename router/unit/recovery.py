"""What a transfer unit's run loop (`router.unit.loop`) does when things change under it: a
failed transaction (abort, rewind, back off, replace a broken producer) and a rebalance
(partitions assigned: claimed in the table; revoked: the batch in flight committed first).
A mixin of `TransferUnit`, whose state it shares; docs/explanation/unit-loop.md."""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from router.metrics.registry import Metrics
from router.unit.bandsource import BandSource
from router.unit.commit.insync import ReplicaCheck
from router.unit.commit.session import TransactionalSession
from router.unit.commit.txnstate import TxnState
from router.unit.source import Source
from router.unit.steps.batch import TP, Batch
from router.unit.steps.emit.records import Output
from router.unit.steps.holds import Backoff, Holds
from router.unit.steps.pipeline import Steps
from router.utils.faults import Faults

log = logging.getLogger("router.unit")

# Transactions failed in a row after which the unit replaces its producer (BROKEN) instead
# of aborting and retrying with the same one.
RETIRE_AFTER = 3


class Recovery:
    session: TransactionalSession
    source: Source
    steps: Steps
    holds: Holds
    backoff: Backoff
    bands: BandSource | None
    replicas: ReplicaCheck
    metrics: Metrics
    faults: Faults
    _inflight: tuple[Batch, Output] | None
    _rewound: dict[TP, int]
    _rewind_to_committed: bool
    _failed_in_a_row: int

    def _complete(self) -> bool:  # router.unit.settling.Settling
        raise NotImplementedError

    # ------------------------------------------------------------------ failures

    def _fail(self, reason: str, batch: Batch | None) -> None:
        """Abort, rewind the batch, pause everything and back off. A broken producer's
        last outcome is unknown: its replacement rewinds to the committed offsets."""
        if self.session.state is TxnState.FAILED:
            self._failed_in_a_row += 1
            if self._failed_in_a_row >= RETIRE_AFTER:
                # The same producer failing again and again (seen after broker restarts:
                # every AddOffsetsToTxn timing out for minutes while other units commit):
                # replace it (new connections, the coordinator looked up afresh).
                self.session.retire(f"{self._failed_in_a_row} transactions failed in a row")
        self.session.abort()
        self._rewound = {}
        if batch is not None:
            self._discard(batch)
        elif self.session.state is TxnState.BROKEN:
            self._rewind_to_committed = True
        ms = self.backoff.start()
        self.source.pause(self.source.assigned)
        short = self.replicas.explain() if reason.startswith("Kafka") else None
        log.warning("%s; backing off %d ms%s", reason, ms, f" ({short})" if short else "")

    def _discard(self, batch: Batch) -> None:
        """Rewind a batch that will not be produced. Partitions rewound since the last
        failure already sit at an earlier offset and stay there."""
        if self.session.state is TxnState.BROKEN:
            self._rewind_to_committed = True
            return
        for (topic, partition), offset in batch.first.items():
            if (topic, partition) not in self._rewound:
                self._rewound[(topic, partition)] = offset
                self.source.seek(topic, partition, offset)

    def _back_off(self) -> None:
        """Wait out the back-off while polling (paused); then finish the abort, or
        replace a broken producer, and resume."""
        assert self.backoff.until is not None
        now = time.monotonic()
        if now < self.backoff.until:
            self.source.drain_paused(min(self.backoff.until - now, 0.1))
            return
        session = self.session
        if not session.abort() and session.state is not TxnState.BROKEN:
            self.backoff.extend()
            return
        if session.state is TxnState.BROKEN:
            if not session.replace():
                self.backoff.extend()
                return
            self._rewind_to_committed = True
        if self._rewind_to_committed:
            if not self.source.rewind_to_committed():
                self.backoff.extend()
                return
            if self.steps.room is not None:
                self.steps.room.reset()
            self._rewind_to_committed = False
        self.backoff.until = None
        waiting = self.holds.waiting()
        self.source.resume(tp for tp in self.source.assigned if tp not in waiting)
        if self.bands is not None:
            self.bands.reset()
        log.info("resuming after back-off")

    def _unstrand(self) -> None:
        """Assign again the partitions the unit has not read for long although records
        wait in them (`router.unit.stalls`: librdkafka left a committed-offset query
        unanswered, or a fetcher never started again). Not while backing off (everything
        is paused); not those the unit keeps paused, nor those whose position may not be
        their committed offset: the batch in flight's, and the waiting room's once read."""
        if self.backoff.until is not None:
            return
        now = time.monotonic()
        stalls = self.source.stalls
        stalls.tick(now, self.source.full)  # a full poll: the local queue may hold more
        if not any(at <= now for at in stalls.due.values()):
            return
        skip = self.holds.waiting()
        if self.bands is not None:
            skip |= self.bands.paused
        if self._inflight is not None:
            skip.update(self._inflight[0].first)
        if self.steps.room is not None:
            room = self.steps.room.topic
            skip.update(tp for tp in stalls.due if tp[0] == room and tp not in stalls.unconsumed)
        stranded = self.source.stranded(now, skip)
        if not stranded:
            return
        log.warning(
            "%d partitions not read for %.0f s although records wait in them (a fetcher "
            "that never started, or stopped): assigning them again: %s",
            len(stranded),
            stalls.after_s,
            ", ".join(f"{t}[{p}]" for t, p in stranded),
        )
        try:
            self.source.reassign(stranded, False, now)
        except KafkaException as exc:  # mid-rebalance, say: asked about again later
            self.source.stalls.assigned(stranded, now)
            log.warning("could not assign them again yet: %s", exc)
            return
        if self.bands is not None:
            self.bands.forget(TopicPartition(t, p) for t, p in stranded)
        self.metrics.inc("stranded_reassigned", len(stranded))

    # ------------------------------------------------------------------ rebalancing

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.faults.hit("in_assign"):  # a late callback in the making (tests)
            self.faults.freeze("in_assign")
        for tp in partitions:
            self.holds.forget((tp.topic, tp.partition))
        self.metrics.inc("rebalances")
        log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        self.source.assign(partitions, paused=self.backoff.until is not None)
        if self.bands is not None:
            self.bands.forget(partitions)
        tps = [(tp.topic, tp.partition) for tp in partitions]
        if self.steps.room is not None:
            self.steps.room.assign(tps)
        self.steps.assigned(tps)  # claimed in the table: a zombie's table calls are refused

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._inflight is not None:
            self._complete()  # its offsets are committed before the partitions move on
        for tp in partitions:
            self.holds.forget((tp.topic, tp.partition))
        self.source.revoke(partitions)
        if self.bands is not None:
            self.bands.forget(partitions)
        tps = [(tp.topic, tp.partition) for tp in partitions]
        if self.steps.room is not None:
            self.steps.room.revoke(tps)
        self.steps.revoked(tps)
        self.metrics.inc("rebalances")
        log.info("revoked %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))
