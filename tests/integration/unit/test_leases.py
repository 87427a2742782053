"""Defect 4: a batch's in-flight leases outlive every path on which its records can still
be appended. Driven step by step in-process against the real broker and Redis."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition

from router.backends.redis.client import redis_client
from router.table.routing import RouteRequest
from router.topology.side import table_for
from router.unit.commit.txnstate import TxnFailed, TxnState
from router.unit.steps.batch import Batch
from router.unit.steps.emit.records import Output, Record
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.helpers import wait_until
from tests.fixtures.inprocess import committed, produce, read_to_end, started_unit, step_until, stop

ONE_DESTINATION = {"send_queue_count": 1, "send_queue_partitions": 1, "receive_units": 1}


def test_a_batch_whose_lease_lapsed_before_it_was_produced_is_not_appended_inside_a_new_group(
    topology: TopologyFactory,
) -> None:
    """A batch routes ordinary messages to the only destination (its lease taken), then
    waits past its lease before it is produced, as a batch waiting for a slow previous
    commit does. Meanwhile another unit's table call finds the lease expired, opens group
    G on that destination and appends G's first message. The batch's ordinary messages
    must not be appended after it while G is open: the batch is rewound and re-routed
    (held under the `hold` policy until G ends), never produced on its lapsed lease."""
    s = topology(
        topology=ONE_DESTINATION,
        routing={"busy_policy": "hold", "hold_timeout_ms": 300_000, "hold_retry_ms": 50},
    )
    # The shortest lease the settings allow: transaction_timeout_ms (1 s) + 5 s.
    kafka = s.kafka.model_copy(update={"transaction_timeout_ms": 1000})
    s = s.model_copy(update={"kafka": kafka})
    queue, transfer = s.topology.send_queues[0], s.topology.transfer_topic
    bootstrap = s.kafka.bootstrap_servers
    client = redis_client(s.redis)
    other = table_for(s, "send", client)  # another unit's view of the send table
    assert other.destinations == ["0"]
    took: list[str] = []

    unit = started_unit(s, "send", partitions=1)
    real_emit = unit.steps.emit

    def emit_after_the_lease_lapsed(batch: Batch, now_ms: int) -> Output:
        if not took:
            lease = ("0", batch.id)
            assert lease in other.inflight(), "the batch took no lease"
            wait_until(
                lambda: other.inflight().get(lease, 0) < other.now_ms(),
                other.lease_ms / 1000 + 30,
                "the lease to expire",
            )
            # Another unit opens G on the destination, clean again, and appends G's first
            # message there.
            result = other.route([RouteRequest("G", False, 300_000, "", "elsewhere/0")], batch="b")
            took.extend(result.decisions)
            assert took == ["0"], f"G did not get the destination: {took}"
            produce(bootstrap, transfer, 0, [b"G-first"])
        return real_emit(batch, now_ms)

    unit.steps.emit = emit_after_the_lease_lapsed  # type: ignore[method-assign]
    try:
        produce(bootstrap, queue, 0, [b"o1", b"o2"])
        step_until(unit, lambda: bool(took), 60, "the batch to be decided and delayed")
        if unit._inflight is not None:
            unit._complete()  # whatever it produced is appended (and committed) now
        # G ends: its final is appended, then released, as G's unit would do.
        produce(bootstrap, transfer, 0, [b"G-final"])
        assert other.release([("G", "*")]) == 1
        step_until(
            unit,
            lambda: committed(s.kafka, s.topology.send_group, queue, 0) == 2,
            60,
            "the ordinary messages to be forwarded",
        )
    finally:
        stop(unit)
        client.close()
    held = read_to_end(bootstrap, transfer)
    assert sorted(held) == [b"G-final", b"G-first", b"o1", b"o2"], held
    inside = held[held.index(b"G-first") + 1 : held.index(b"G-final")]
    assert not inside, f"appended inside group G's open span: {inside} (all: {held})"


def test_a_commit_whose_records_are_not_appended_before_the_lease_ends_is_aborted(
    topology: TopologyFactory,
) -> None:
    """The commit puts the batch's records on the broker before its lease ends, or fails
    the transaction: a batch past its lease is ended by a new producer (read_committed
    readers never see it) and replayed; one inside its lease commits."""
    s = topology(topology=ONE_DESTINATION)
    queue, transfer = s.topology.send_queues[0], s.topology.transfer_topic
    unit = started_unit(s, "send", partitions=1)
    session = unit.session

    def batch(value: bytes, append_by: float) -> None:
        assert session.begin(session.generation)
        session.produce([Record(transfer, 0, None, value, None, 0, None)])
        offsets = [TopicPartition(queue, 0, 1)]
        session.commit(offsets, unit.source.group_metadata(), append_by)

    try:
        batch(b"late", time.monotonic() - 0.001)  # its lease already ended
        with pytest.raises(TxnFailed, match="lease"):
            session.wait_committed()
        # Its records may still be on their way (a time-out, router.unit.commit.timeouts):
        # not aborted and continued, the producer is replaced, which ends the transaction.
        assert session.state is TxnState.BROKEN
        assert not session.abort() and session.replace()
        batch(b"in-time", time.monotonic() + 30)
        session.wait_committed()
    finally:
        stop(unit)
    assert read_to_end(s.kafka.bootstrap_servers, transfer) == [b"in-time"]
