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
from router.unit.commit.timeouts import TXN_TIMEOUT_S, timed_out
from router.utils.faults import Faults

log = logging.getLogger("router.session")

COMMIT_ATTEMPTS = 5


def finish(
    producer: Producer,
    offsets: list[TopicPartition],
    metadata: Any,
    append_by: float | None,
    m: Metrics,
    faults: Faults,
    suspect: Callable[[str], None],
) -> None:
    """Offsets, appends and commit; raises KafkaException if the commit failed for good.
    `suspect` hears of a retried commit whose first attempt timed out (a request of this
    epoch may still land later)."""
    t0 = time.perf_counter()
    producer.send_offsets_to_transaction(offsets, metadata, TXN_TIMEOUT_S)
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
