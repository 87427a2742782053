"""The end of a committed batch's transaction, on the session's call thread: its offsets into
the transaction, its records on the broker before its leases end, and the commit, retried
while the error allows (`router.unit.commit.session` drives it)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition

from router.metrics.registry import Metrics
from router.unit.commit.leases import appended_by
from router.unit.commit.timeouts import (
    COMMIT_DEADLINE_S,
    OFFSETS_DEADLINE_S,
    TXN_TIMEOUT_S,
    timed_out,
)
from router.utils.faults import Faults

log = logging.getLogger("router.session")

COMMIT_ATTEMPTS = 5


class Progress:
    """One commit's: since when (time.monotonic()) it has been in
    send_offsets_to_transaction, if it is."""

    __slots__ = ("offsets_since",)

    def __init__(self) -> None:
        self.offsets_since: float | None = None


class OffsetsWatch:
    """How long a commit may stay in send_offsets_to_transaction (`OFFSETS_DEADLINE_S`,
    doubled by each commit abandoned there, up to `COMMIT_DEADLINE_S`, and set back by one
    that gets through), and whether the one in flight has."""

    def __init__(self) -> None:
        self.limit_s = OFFSETS_DEADLINE_S
        self._current = Progress()
        self._tripped: float | None = None  # how long the commit in flight was in it, if stuck

    def begin(self) -> Progress:
        """A new commit's progress (a call abandoned earlier keeps writing to its own)."""
        self._current, self._tripped = Progress(), None
        return self._current

    def stuck(self, now: float) -> bool:
        """Whether the commit in flight has been in the call longer than the limit (the
        verdict is kept for `abandoned`, whatever the call does next)."""
        since = self._current.offsets_since
        if since is None or now - since < self.limit_s:
            return False
        self._tripped = now - since
        return True

    def abandoned(self) -> str | None:
        """The reason, if the commit in flight was abandoned because `stuck` said so (and
        the limit doubles); None if it was abandoned for another reason."""
        took, self._tripped = self._tripped, None
        if took is None:
            return None
        self.limit_s = min(2 * self.limit_s, COMMIT_DEADLINE_S)
        return f"send_offsets_to_transaction did not return in {took:.0f} s (librdkafka#5456)"

    def committed(self) -> None:
        self.limit_s = OFFSETS_DEADLINE_S


def finish(
    producer: Producer,
    offsets: list[TopicPartition],
    metadata: Any,
    append_by: float | None,
    m: Metrics,
    faults: Faults,
    suspect: Callable[[str], None],
    progress: Progress | None = None,
) -> None:
    """Offsets, appends and commit; raises KafkaException if the commit failed for good.
    `suspect` hears of a retried commit whose first attempt timed out (a request of this
    epoch may still land later); `progress`, of the time spent sending the offsets."""
    progress = progress or Progress()
    progress.offsets_since = time.monotonic()
    t0 = time.perf_counter()
    try:
        producer.send_offsets_to_transaction(offsets, metadata, TXN_TIMEOUT_S)
    finally:  # a call that failed is not stuck in it
        progress.offsets_since = None
    t1 = time.perf_counter()
    m.inc("time_offsets_us", int((t1 - t0) * 1e6))
    if faults.hit("after_produce"):
        producer.flush(TXN_TIMEOUT_S)  # on the broker, inside the open transaction
        faults.die("after_produce")
    if append_by is not None:  # the batch's leases end then: `router.unit.commit.leases`
        appended_by(producer, append_by)
    t2 = time.perf_counter()
    m.inc("time_append_us", int((t2 - t1) * 1e6))
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            producer.commit_transaction(TXN_TIMEOUT_S)
            t3 = time.perf_counter()
            m.observe("txn_commit_seconds", t3 - t0)
            m.inc("time_commit_us", int((t3 - t2) * 1e6))
            return
        except KafkaException as exc:
            err = exc.args[0]
            if err.retriable() and not err.txn_requires_abort() and attempt < COMMIT_ATTEMPTS - 1:
                log.warning("commit failed (retriable), retrying: %s", err)
                if timed_out(err):
                    suspect(str(err))
                continue
            raise
