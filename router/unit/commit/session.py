"""The transactional session: one transactional producer and its transactions, driven
through the state machine of `router.unit.commit.txnstate` (its states, transitions and
what each means for a batch are described there).

Blocking broker calls run on a daemon thread with a hard deadline
(`router.backends.kafka.callthread`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from router.backends.kafka.brokerwatch import NoBrokerWatch
from router.backends.kafka.callthread import Abandoned, CallThread, Done
from router.backends.kafka.clients import dispose_in_background
from router.backends.kafka.fatal import fatal_unmasked
from router.metrics.registry import Metrics
from router.unit.commit.finishing import OffsetsWatch, Progress, finish
from router.unit.commit.producing import produce_in_order
from router.unit.commit.timeouts import (
    ABORT_TIMEOUT_S,
    CALL_DEADLINE_S,
    COMMIT_DEADLINE_S,
    STOP_GRACE_S,
    TXN_TIMEOUT_S,
    timed_out,
)
from router.unit.commit.txnstate import TRANSITIONS, TxnFailed, TxnState
from router.unit.steps.emit.records import Record
from router.utils.faults import Faults

log = logging.getLogger("router.session")
S = TxnState


class TransactionalSession:
    def __init__(
        self,
        new_producer: Callable[[], Producer],
        stop: threading.Event,
        metrics: Metrics,
        faults: Faults | None = None,
        watch: NoBrokerWatch | None = None,
    ) -> None:
        """`watch`: fed by the producers' statistics (`new_producer` builds them with
        `router.backends.kafka.brokerwatch.watched`); a producer that names no broker for
        its time is retired, as after a fatal error (librdkafka#5301)."""
        self._new_producer = new_producer
        self._stop = stop
        self.metrics = metrics
        self.faults = faults or Faults()
        self.watch = watch if watch is not None else NoBrokerWatch(0)
        self.producer = new_producer()
        self.state = S.INIT
        self.generation = 0
        self.failure: str | None = None  # why the last transaction failed
        self._calls = CallThread()
        self._committing: Done | None = None
        self.offsets = OffsetsWatch()  # a commit stuck sending its offsets: librdkafka#5456
        self._abort_failures = 0
        self.suspect: str | None = None  # a timed-out call this producer survived

    def _to(self, state: TxnState) -> None:
        if state not in TRANSITIONS[self.state]:
            raise RuntimeError(f"transaction state {self.state.value} -> {state.value}")
        self.state = state

    # ------------------------------------------------------------------ broker calls

    def _call(self, call: Callable[..., Any], *args: Any, holds_batch: bool = True) -> Any:
        """A transactional call on the call thread. A stop request gives a call that
        finishes a batch STOP_GRACE_S, and abandons one that holds none (init) at once."""
        done = self._calls.submit(call, *args)
        del call, args  # a producer's method: an exception's traceback would keep it
        return self._wait(done, CALL_DEADLINE_S, holds_batch)

    def _wait(
        self, done: Done, deadline: float, holds_batch: bool = True, committing: bool = False
    ) -> Any:
        """`committing`: a commit, abandoned too if stuck sending its offsets (`offsets`)."""
        grace, stuck = STOP_GRACE_S if holds_batch else 0, self.offsets.stuck
        try:
            return CallThread.wait(done, deadline, self._stop, grace, stuck if committing else None)
        except Abandoned:
            self._calls.retire()  # blocked, abandoned: it ends if the call ever returns
            self._calls = CallThread()
            why = "abandoned: stopping" if self._stop.is_set() else "did not return in time"
            if committing and not self._stop.is_set():
                why = self.offsets.abandoned() or why
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, why, fatal=True)) from None

    def _failed(self, exc: KafkaException) -> TxnFailed:
        err = exc.args[0]
        self.generation += 1
        self.metrics.inc("kafka_errors")
        self.failure = str(err)
        # Fatal: fenced (after the coordinator aborted a transaction that outlived its
        # timeout, say), or `_FATAL`: a call on a producer that failed so before. Timed out:
        # a request of this epoch may still land in the next transaction; so may one that
        # timed out earlier in it (`suspect`: a commit's first EndTxn, retried and failed).
        fatal = err.fatal() or err.code() == KafkaError._FATAL
        broken = fatal or timed_out(err) or self.suspect is not None
        self._to(S.BROKEN if broken else S.FAILED)
        return TxnFailed(f"Kafka transaction failed: {err}")

    # ------------------------------------------------------------------ transitions

    def start(self) -> bool:
        """INIT -> READY. False if the broker cannot be reached yet (retry later)."""
        try:
            self._call(self.producer.init_transactions, TXN_TIMEOUT_S, holds_batch=False)
        except KafkaException as exc:
            log.warning("cannot start transactions yet (broker away?), retrying: %s", exc)
            replace = exc.args[0].fatal() or self.watch.stuck() is not None
        else:
            self._to(S.READY)
            return True
        if replace:  # once the exception (and what its traceback holds) is gone
            old, self.producer = [self.producer], self._new_producer()
            dispose_in_background(old)
            self.watch.reset()
        return False

    def begin(self, generation: int) -> bool:
        """READY -> OPEN for a batch decided in `generation`. False, and no change, if the
        batch is stale (a transaction failed since it was decided)."""
        if generation != self.generation:
            return False
        if self.suspect is not None and not self._swap(f"a call timed out: {self.suspect}"):
            self.generation += 1
            self.failure = f"could not replace the producer after a time-out: {self.suspect}"
            self._to(S.BROKEN)
            return False
        try:
            with fatal_unmasked():
                self.producer.begin_transaction()
        except KafkaException as exc:
            raise self._failed(exc) from exc
        self._to(S.OPEN)
        return True

    def produce(
        self,
        records: list[Record],
        track: Callable[[tuple[str, int, int]], Callable[[Any, Any], None]] | None = None,
        barriers: Collection[int] = (),
    ) -> None:
        """Produce a batch's records inside the open transaction, in order. `track` gives
        the delivery callback of a record whose `source` is set. Before each position in
        `barriers`, every record produced so far is on the broker (flushed): records on
        different partitions are otherwise appended in no particular order."""
        assert self.state is S.OPEN
        try:
            with fatal_unmasked():  # a barrier's flush serves callbacks
                produce_in_order(self.producer, records, track, barriers)
        except KafkaException as exc:
            raise self._failed(exc) from exc

    def fail(self, reason: str) -> TxnFailed:
        """OPEN -> FAILED: the unit gives up the open transaction (its batch's leases
        lapsed); it is aborted like any failed one."""
        self.generation += 1
        self.failure = reason
        self._to(S.FAILED)
        return TxnFailed(reason)

    def commit(
        self,
        offsets: list[TopicPartition],
        group_metadata: Any,
        append_by: float | None = None,
        after: Callable[[], None] | None = None,
    ) -> None:
        """OPEN -> COMMITTING: the offsets into the transaction and the commit, on the
        call thread. With `append_by` (time.monotonic()), the transaction fails unless
        every record is on the broker by then. `after` runs on the call thread as soon as
        the commit succeeded (never after a failed one), before `wait_committed` returns:
        what must follow the commit at once, whatever the run loop is doing (the table's
        releases). It must not raise. `wait_committed` collects the outcome."""
        self._to(S.COMMITTING)
        self._committing = self._calls.submit(
            self._finish, self.producer, offsets, group_metadata, append_by, after,
            self.offsets.begin(),
        )  # fmt: skip

    def _finish(
        self,
        producer: Producer,
        offsets: list[TopicPartition],
        metadata: Any,
        append_by: float | None,
        after: Callable[[], None] | None = None,
        progress: Progress | None = None,
    ) -> None:
        def suspect(why: str) -> None:
            if producer is self.producer:  # not a call abandoned meanwhile, come back late
                self.suspect = why

        m, faults = self.metrics, self.faults
        finish(producer, offsets, metadata, append_by, m, faults, suspect, progress)
        if after is not None:
            after()

    @property
    def committing(self) -> bool:
        return self.state is S.COMMITTING

    def wait_committed(self) -> None:
        """COMMITTING -> READY, or raise TxnFailed (state FAILED or BROKEN)."""
        assert self._committing is not None and self.state is S.COMMITTING
        done, self._committing = self._committing, None
        try:
            self._wait(done, COMMIT_DEADLINE_S, committing=True)
        except KafkaException as exc:
            raise self._failed(exc) from exc
        self.offsets.committed()
        self._to(S.READY)
        self._abort_failures = 0

    def retire(self, reason: str) -> None:
        """FAILED -> BROKEN: give up on this producer (it keeps failing); the unit replaces
        it and resumes from the committed offsets, as after a fatal error."""
        self.generation += 1
        self.failure = reason
        self._to(S.BROKEN)
        log.warning("replacing the transactional producer: %s", reason)

    def abort(self) -> bool:
        """FAILED -> READY. False if that is still to be done (or now BROKEN)."""
        if self.state is not S.FAILED:
            return self.state is S.READY
        try:
            self._call(self.producer.abort_transaction, ABORT_TIMEOUT_S)
        except KafkaException as exc:
            self._abort_failures += 1
            log.warning("abort failed (%d in a row): %s", self._abort_failures, exc)
            err = exc.args[0]
            if err.fatal() or timed_out(err) or self._abort_failures >= 2:
                self._to(S.BROKEN)
            return False
        self._abort_failures = 0
        self.metrics.inc("txn_aborts")
        self._to(S.READY)
        return True

    def replace(self) -> bool:
        """BROKEN -> READY with a new producer under the same transactional ID. False if
        the broker is not back yet. The caller resumes from the committed offsets."""
        if not self._swap(self.failure or "broken"):
            return False
        self._to(S.READY)
        return True

    def _swap(self, why: str) -> bool:
        """A new producer under the same transactional ID in place of this one (its
        init_transactions bumps the epoch: whatever the old one has in flight is fenced).
        False if it could not start (the broker away). A producer let go is destroyed on a
        thread of its own (`dispose_in_background`: that can hang, librdkafka#5476)."""
        new = [self._new_producer()]
        try:
            self._call(new[0].init_transactions, TXN_TIMEOUT_S, holds_batch=False)
        except KafkaException as exc:
            log.warning("a new producer could not start yet: %s", exc)
        else:
            log.info("transactional producer replaced (%s)", why)
            old, self.producer = [self.producer], new.pop()
            dispose_in_background(old)
            self.watch.reset()
            self._abort_failures = 0
            self.suspect = None
            self.metrics.inc("producer_restarts")
            return True
        dispose_in_background(new)  # once the exception (and what it holds) is gone
        return False

    def close(self, wait_s: float = 5.0) -> None:
        """At stop, the session's last call: its producer destroyed on a thread of its own,
        waited for up to `wait_s` (a BROKEN one's destroy can hang, librdkafka#5476: the
        process then exits all the same; a healthy one is gone before it exits, as before)."""
        box = [self.__dict__.pop("producer")]
        closing = threading.Thread(target=box.clear, name="kafka-client-close", daemon=True)
        closing.start()
        closing.join(wait_s)

    def poll(self) -> None:
        """Serve the producer's callbacks. A fatal error found here, or no broker for the
        watch's time, means BROKEN (while committing, the commit itself fails with it and
        `wait_committed` says so)."""
        try:
            with fatal_unmasked():
                self.producer.poll(0)
            gone = self.watch.stuck()
            why = f"the producer had no broker for {gone or 0:.0f} s (librdkafka#5301)"
        except KafkaException as exc:  # confluent-kafka raises a fatal error from poll()
            if not exc.args[0].fatal():
                raise
            gone, why = 0.0, f"transactional producer failed: {exc.args[0]}"
        if gone is not None and self.state in (S.READY, S.FAILED):
            self.generation += 1
            self.failure = why
            self._to(S.BROKEN)
