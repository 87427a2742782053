"""The run loop's hard sequences, driven step by step in-process against the real broker
and Redis (the issue's defect list names them)."""

from __future__ import annotations

import os

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import TopologyFactory
from tests.integration.inprocess import (
    committed,
    limit_record_size,
    produce,
    read_to_end,
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
        unit={"batch_size": 10},
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
