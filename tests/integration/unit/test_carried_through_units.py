"""Carried finals through a real unit (`TransferUnit` stepped in-process, the real broker
and Redis): the batch in flight fails after the next batch took the destination its final
freed. The next batch must never be produced, and the replay must keep the group whole
before the one that followed it."""

from __future__ import annotations

import os

import redis
from confluent_kafka.admin import AdminClient

from router.contract import headers_for
from router.table import room
from router.topology.side import table_for
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.inprocess import (
    committed,
    limit_record_size,
    read_records,
    read_to_end,
    room_unit,
    send,
    started_unit,
    step_until,
    stop,
)


def test_a_group_routed_on_the_final_of_a_batch_that_then_fails_is_not_produced(
    topology: TopologyFactory, admin: AdminClient, redis_client: redis.Redis
) -> None:
    """Batch N routes group A whole to the only destination; its final is refused by the
    broker (too large for the transfer topic), so N's commit fails. Batch N+1, decided
    while N commits, carries A's final: group B takes the destination A's final freed
    instead of waiting in the room. N fails, so N+1 is discarded, never produced; the
    replay dead-letters A's final (a close marker in its place) and then forwards B: the
    transfer topic holds A, A's close, B, each once, in that order."""
    s = topology(
        topology={"send_queue_count": 1, "send_queue_partitions": 1, "receive_units": 1},
        unit={"batch_size": 2, "overlap_min_batch": 0},  # the overlap at any size
    )
    queue, transfer = s.topology.send_queues[0], s.topology.transfer_topic
    limit_record_size(admin, transfer, 20_000)  # smaller than the router's own limit
    big = os.urandom(100_000)
    bootstrap = s.kafka.bootstrap_servers
    send(bootstrap, queue, [
        (0, b"a0", headers_for("A", seq=0)),
        (0, big, headers_for("A", seq=1, final=True)),
        (0, b"b0", headers_for("B", seq=0)),
        (0, b"b1", headers_for("B", seq=1, final=True)),
    ])  # fmt: skip
    table = table_for(s, "send", redis_client)
    (dest,) = table.destinations
    unit = started_unit(s, "send", partitions=1)
    try:
        step_until(unit, lambda: unit._inflight is not None, 30, "batch N in flight")
        first = unit._inflight[0]  # type: ignore[index]
        assert [m.m.value() for m in first.items] == [b"a0", big]
        batches = unit._batches
        unit.step()  # N+1 decided on N's finals, then N's failure: N+1 discarded
        assert unit._batches == batches + 1, "no batch N+1 was decided during N's commit"
        assert unit._inflight is None and unit.backoff.until is not None, "N did not fail"
        b = table.entry("B")
        assert b is not None and b.dest == dest and b.state == room.OPEN, (
            f"B did not take A's destination on A's carried final: {b}"
        )

        def replayed() -> bool:
            return committed(s.kafka, s.topology.send_group, queue, 0) == 4

        step_until(unit, replayed, 60, "the replay to commit the partition to its end")
    finally:
        stop(unit)
    forwarded = read_to_end(bootstrap, transfer)
    assert forwarded == [b"a0", None, b"b0", b"b1"], forwarded  # None: A's close marker
    dead = read_records(bootstrap, s.topology.dead_letter_topic)
    assert [dict(h).get("reason") for _, h in dead] == [b"rejected-by-broker"]
    assert table.loads() == {} and table.entry("A") is None and table.entry("B") is None


def test_an_id_reused_after_a_carried_final_waits_for_the_group_that_took_its_destination(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """A ends in batch N; batch N+1, decided while N commits, starts B on the destination
    A's final freed, then A again (the ID reused): held, then waiting in the room behind B,
    never interleaved with it. The transfer topic holds A, B, then the second A (the same
    whether N+1 was decided during N's commit or after it: A released by then)."""
    s = topology(
        topology={"send_queue_count": 1, "send_queue_partitions": 1, "receive_units": 1},
        unit={"batch_size": 2, "overlap_min_batch": 0},
        routing={"hold_retry_ms": 50, "room_partitions": 1},
    )
    queue, transfer = s.topology.send_queues[0], s.topology.transfer_topic
    bootstrap = s.kafka.bootstrap_servers
    send(bootstrap, queue, [
        (0, b"a0", headers_for("A", seq=0)),
        (0, b"a1", headers_for("A", seq=1, final=True)),
        (0, b"b0", headers_for("B", seq=0)),
        (0, b"A0", headers_for("A", seq=0)),  # the ID reused
        (0, b"b1", headers_for("B", seq=1, final=True)),
        (0, b"A1", headers_for("A", seq=1, final=True)),
    ])  # fmt: skip
    table = table_for(s, "send", redis_client)
    unit = room_unit(s)
    try:

        def done() -> bool:  # the second A drained from the room, every group released
            return (
                committed(s.kafka, s.topology.send_group, queue, 0) == 6 and table.entries() == {}
            )

        step_until(unit, done, 60, "every group forwarded and released")
    finally:
        stop(unit)
    assert read_to_end(bootstrap, transfer) == [b"a0", b"a1", b"b0", b"b1", b"A0", b"A1"]
    assert table.loads() == {} and table.entries() == {}
