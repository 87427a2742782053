"""A unit's bookkeeping around a batch's transaction: the records the broker refused,
and a committed batch's counts.

A record the broker refuses (too large for the destination topic, say) fails its batch's
transaction; the unit remembers its source position, and the replay dead-letters it with
reason `rejected-by-broker` (the classify step reads `rejected`), until a batch holding
it commits."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from router.metrics.registry import MetricName, Metrics, wait_bucket
from router.unit.steps.batch import Batch
from router.unit.steps.emit.records import Output

Position = tuple[str, int, int]  # topic, partition, offset

BROKER_REJECTIONS = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_MSG_SIZE,
}


def tracker(rejected: dict[Position, str]) -> Callable[[Position], Callable[[Any, Any], None]]:
    """The delivery callback for a record from source position `source`."""

    def track(source: Position) -> Callable[[Any, Any], None]:
        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None and err.code() in BROKER_REJECTIONS:
                rejected[source] = f"the broker refused the record: {err}"

        return delivered

    return track


def forget_committed(rejected: dict[Position, str], batch: Batch) -> None:
    """Forget the positions that `batch`, now committed, consumed."""
    resume = {(tp.topic, tp.partition): tp.offset for tp in batch.resume_offsets()}
    for key in [k for k in rejected if k[2] < resume.get((k[0], k[1]), -1)]:
        del rejected[key]


def count_committed(metrics: Metrics, out: Output) -> None:
    """A committed batch's counts, and the hop latency of its first and last forwarded
    records (timestamp to commit: two samples a batch, not one per message)."""
    records = out.records
    if metrics.sink is not None and records:
        now_ms = time.time() * 1000
        for r in (records[0], records[-1]) if len(records) > 1 else records:
            if r.timestamp > 0:
                metrics.observe("hop_latency_seconds", max(0.0, now_ms - r.timestamp) / 1000)
    counts: list[tuple[MetricName, int]] = [
        ("batches", 1),
        ("txn_commits", 1),
        ("messages_in", out.consumed),
        ("messages_out", out.forwarded),
        ("grouped", out.grouped),
        ("ordinary", out.forwarded - out.grouped),
        ("finals", len(out.finals)),
        ("dead_letters", out.dead),
        ("expired", out.expired),
        ("parked", out.parked),
        ("groups_stopped", out.groups_stopped),
        ("orphans_parked", out.orphans_parked),
        ("close_markers", out.close_markers),
        ("closes", out.closes),
        ("skip_markers", out.skip_markers),
        ("skips", out.skips),
        ("room_parked", out.parked_in_room),
        ("room_drained", out.drained),
        ("room_chained", out.chained),
        ("staging_aborted", out.staging_aborted),
        ("room_staged_bytes", out.staged_bytes),
        ("seq_duplicates", out.seq_duplicates),
        ("sequence_gaps", out.sequence_gaps),
        ("multicast", out.multicast),
        ("multicast_copies", out.multicast_copies),
    ]
    for name, n in counts:
        if n:
            metrics.inc(name, n)
    for ms in out.room_waits_ms:
        metrics.inc("room_admitted")
        metrics.inc(wait_bucket(ms))
