"""The run loop's hard sequences, driven step by step in-process against the real broker
and Redis (the issue's defect list names them)."""

from __future__ import annotations

import os

import redis
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from router import contract
from router.contract import headers_for
from router.table.routing import NO_DEST, STOPPED
from router.topology.side import table_for
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.inprocess import (
    committed,
    limit_record_size,
    produce,
    read_records,
    read_to_end,
    send,
    started_unit,
    step_until,
    stop,
)


def test_a_batch_polled_while_a_revoke_fails_the_previous_commit_is_not_produced(
    topology: TopologyFactory, admin: AdminClient
) -> None:
    """Defect 1 (loss with the commit overlap). Batch N is committing on the call thread
    and will fail (the broker refuses one of its records). The next poll returns batch
    N+1 with later messages of the same partition, and a partial revoke delivered inside
    that poll completes N, which fails and rewinds the partition. N+1 must then be
    rewound, not produced: producing it would commit the partition's offset past N's
    messages, which were never forwarded."""
    s = topology(
        topology={"send_queue_count": 1, "send_queue_partitions": 2, "receive_units": 1},
        unit={"batch_size": 10, "overlap_min_batch": 0},  # the overlap at any size
    )
    queue, transfer = s.topology.send_queues[0], s.topology.transfer_topic
    limit_record_size(admin, transfer, 20_000)  # smaller than the router's own limit
    # The router takes it (under kafka.max_message_bytes); the transfer topic refuses it.
    big = os.urandom(100_000)
    bootstrap = s.kafka.bootstrap_servers
    unit = started_unit(s, "send", partitions=2)
    try:
        produce(bootstrap, queue, 0, [b"m0", big])
        step_until(unit, lambda: unit._inflight is not None, 30, "batch N in flight")
        assert [m.m.value() for m in unit._inflight[0].items] == [b"m0", big]  # type: ignore[index]
        produce(bootstrap, queue, 0, [b"m2", b"m3"])

        real_poll = unit.source.poll

        def poll_with_a_revoke(timeout: float) -> list[object]:
            # As librdkafka does: messages fetched, then the rebalance callback runs
            # inside the same poll, before the messages reach the loop.
            got: list[object] = []
            for _ in range(50):
                got += real_poll(0.1)
                if len(got) >= 2:
                    break
            unit._on_revoke(unit.source.consumer, [TopicPartition(queue, 1)])
            return got

        unit.source.poll = poll_with_a_revoke  # type: ignore[method-assign,assignment]
        unit.step()
        unit.source.poll = real_poll  # type: ignore[method-assign]
        assert unit._inflight is None, "the batch polled with the failure was produced"

        def replayed() -> bool:
            return committed(s.kafka, s.topology.send_group, queue, 0) == 4

        step_until(unit, replayed, 60, "the replay to commit partition 0 to its end")
    finally:
        stop(unit)
    assert read_to_end(bootstrap, transfer) == [b"m0", b"m2", b"m3"]
    dead = read_to_end(bootstrap, s.topology.dead_letter_topic)
    assert len(dead) == 1 and b"rejected-by-broker" in dead[0]


def test_a_stopped_group_frees_its_destination_and_a_second_partition_is_refused(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """Defects 6 and 8 through a real unit. A group stopped by a poison message gives its
    destination back once its batch commits (not after its TTL); a message of an open
    group arriving on another send-queue partition is dead-lettered
    (`group-spans-partitions`), never routed into the group."""
    s = topology(
        topology={"send_queue_count": 1, "send_queue_partitions": 2, "receive_units": 2},
        unit={"batch_size": 50},
    )
    queue, bootstrap = s.topology.send_queues[0], s.kafka.bootstrap_servers
    poison = [*headers_for("S", on_poison="stop-group"), (contract.SEQ, b"not-a-number")]
    send(bootstrap, queue, [
        (0, b"s0", headers_for("S", seq=0, on_poison="stop-group")),
        (0, b"s1", poison),
        (0, b"g0", headers_for("G", seq=0)),
    ])  # fmt: skip
    unit = started_unit(s, "send", partitions=2)
    try:
        step_until(unit, lambda: committed(s.kafka, s.topology.send_group, queue, 0) == 3, 60, "p0")
        send(bootstrap, queue, [
            (1, b"g1", headers_for("G", seq=1)),  # G lives on partition 0
            (0, b"g2", headers_for("G", seq=2, final=True)),
        ])  # fmt: skip

        def both_done() -> bool:
            group = s.topology.send_group
            return (
                committed(s.kafka, group, queue, 0) == 4
                and committed(s.kafka, group, queue, 1) == 1
            )

        step_until(unit, both_done, 60, "both partitions committed")
    finally:
        stop(unit)
    table = table_for(s, "send", redis_client)
    assert table.loads() == {}, "a stopped or finished group still holds its destination"
    stopped = table.entry("S")
    assert stopped is not None and stopped.closing == STOPPED and stopped.dest == NO_DEST
    assert table.entry("G") is None
    forwarded = read_to_end(bootstrap, s.topology.transfer_topic, partitions=2)
    # S's close marker (no value) follows s0, so that the receive side releases S too
    assert sorted(v for v in forwarded if v is not None) == [b"g0", b"g2", b"s0"]
    assert forwarded.count(None) == 1
    dead = read_records(bootstrap, s.topology.dead_letter_topic)
    reasons = [dict(headers).get("reason") for _, headers in dead]
    assert reasons == [b"bad-seq", b"group-spans-partitions"]
