"""How a transfer unit's batch ends once produced (`router.unit.loop`): its commit awaited,
then settled (the table's releases run on the commit's call thread as soon as it
committed), its holds applied; its leases kept while it is produced. The base of
`TransferUnit` (over `router.unit.recovery`, whose `_fail` it calls), sharing its state;
docs/explanation/unit-loop.md."""

from __future__ import annotations

import time

from router.metrics.registry import Metrics
from router.unit.commit.bookkeeping import count_committed, forget_committed
from router.unit.commit.leases import LeaseLost, Leases
from router.unit.commit.session import TransactionalSession
from router.unit.commit.txnstate import TxnFailed
from router.unit.recovery import Recovery
from router.unit.source import Source
from router.unit.spans import UnitSpans
from router.unit.steps.batch import Batch
from router.unit.steps.emit.records import Output
from router.unit.steps.holds import Backoff, Holds
from router.unit.steps.pipeline import Steps
from router.utils.faults import Faults


class Settling(Recovery):
    session: TransactionalSession
    source: Source
    steps: Steps
    holds: Holds
    backoff: Backoff
    leases: Leases
    metrics: Metrics
    faults: Faults
    tracing: UnitSpans | None
    rejected: dict[tuple[str, int, int], str]
    _inflight: tuple[Batch, Output] | None
    _failed_in_a_row: int

    def _complete(self) -> bool:
        """Wait for the batch in flight to commit, then settle it and apply its holds.
        False if its transaction failed (rewound, backing off)."""
        assert self._inflight is not None
        (batch, out), self._inflight = self._inflight, None
        t0 = time.perf_counter_ns()
        try:
            self.session.wait_committed()
            self.metrics.inc("time_commit_wait_us", (time.perf_counter_ns() - t0) // 1000)
        except TxnFailed as exc:
            self._fail(str(exc), batch)
            return False
        count_committed(self.metrics, out)
        self.backoff.ms = 0
        self._failed_in_a_row = 0
        if self.rejected:
            forget_committed(self.rejected, batch)
        self.steps.settle(batch, out)
        self._apply_holds(batch)
        if self.tracing is not None:
            self.tracing.committed(batch, out)
        return True

    def _after_commit(self, batch: Batch, out: Output) -> None:
        """On the session's call thread, as soon as the batch committed: the table's
        releases (`Steps.release`), not delayed by the run loop deciding the next batch."""
        if self.faults.hit("after_commit"):  # committed, nothing released: the sweeper's
            self.faults.die("after_commit")
        self.steps.release(batch, out)

    def _keep_leases(self, batch: Batch, out: Output) -> float | None:
        """When the batch's records must be appended by (None: no leases); renewed if
        it waited long. Lapsed: its open transaction fails (rewound, replayed)."""
        try:
            return self.leases.keep(batch, out.ordinary_dests, out.parked_in_room > 0)
        except LeaseLost as exc:
            raise self.session.fail(str(exc)) from exc

    def _apply_holds(self, batch: Batch) -> None:
        for (topic, partition), offset in self.holds.settle(batch, time.monotonic()):
            self.source.pause([(topic, partition)])
            self.source.seek(topic, partition, offset)
