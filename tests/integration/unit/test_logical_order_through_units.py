"""Logical order (`guarantee-order: logical`): a group's members are delivered in
`guarantee-seq` order whatever send-queue partition, unit or physical order they come in;
a gap that does not fill is reported (SequenceGap) and handled per `routing.gap_policy`.
Judged from what the receive queues hold (read_committed) against what was produced."""

from __future__ import annotations

import random

from confluent_kafka import Producer

from ops.harness.stack.pipeline import PipelineSpec
from router.backends.redis.client import redis_client
from router.contract import headers_for, schemas
from router.contract.events import DEAD_LETTER, SEQUENCE_GAP
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import read_records
from tests.fixtures.queues import Queues, one_way

LOGICAL = {"order": "logical"}


def test_members_from_three_partitions_in_shuffled_order_arrive_in_sequence(
    pipeline: PipelineFactory,
) -> None:
    """Six groups of 12 members in logical order, each member on a random one of three
    send-queue partitions (two send units, so members of one group pass through both), in
    shuffled physical order, with ordinary messages and a producer's retry of one member
    mixed in. Every group arrives once, complete, in sequence order, on one receive queue,
    with nothing inside it (busy policy wait); the retry is dead-lettered, not delivered."""
    p = pipeline(
        PipelineSpec(
            send_units=2,
            receive_units=1,
            sweepers=0,
            send_queues=1,
            send_queue_partitions=3,
            transfer_partitions=3,
            receive_queues=3,
            busy_policy="wait",
        )
    )
    s = p.settings
    (queue,) = s.topology.send_queues
    rng = random.Random(7)
    sends: list[tuple[int, bytes, list[tuple[str, bytes]]]] = []
    groups = {f"L{g}": 12 for g in range(6)}
    for gid, n in groups.items():
        for i in range(n):
            h = headers_for(gid, seq=i, final=i == n - 1, **LOGICAL)
            sends.append((rng.randrange(3), f"{gid}-{i}".encode(), h))
    for i in range(20):
        sends.append((rng.randrange(3), f"o{i}".encode(), headers_for(None)))
    rng.shuffle(sends)
    retry = next(x for x in sends if x[1] == b"L2-5")
    sends.append(((retry[0] + 1) % 3, retry[1], retry[2]))  # a retry, on another partition
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    for partition, value, h in sends:
        producer.produce(queue, value, partition=partition, headers=h)
    producer.flush(10)
    expected = sum(groups.values()) + 20
    q = Queues(s)
    table = table_for(s, "send", redis_client(s.redis))
    q.read_until(expected, report=lambda: f"send table: {table.entries()} {table.stats()}")
    values = q.values()
    assert len(values) == len(set(values)) == expected, "lost or duplicated"
    for gid, n in groups.items():
        homes = [name for name, msgs in q.by_queue.items() if any(g == gid for g, _, _ in msgs)]
        assert len(homes) == 1, f"{gid} split over {homes}"
        msgs = q.by_queue[homes[0]]
        at = [i for i, (g, _, _) in enumerate(msgs) if g == gid]
        assert [msgs[i][1] for i in at] == list(range(n)), f"{gid} out of sequence"
        assert at == list(range(at[0], at[0] + n)), f"something inside {gid}: {msgs}"
    dead = read_records(s, s.topology.dead_letter_topic, DEAD_LETTER, 1)
    assert dead[0]["reason_code"] == "duplicate-seq" and dead[0]["value"] == b"L2-5", dead
    q.consumer.close()


def test_a_gap_that_never_fills_is_reported_and_the_group_waits_for_it(
    pipeline: PipelineFactory,
) -> None:
    """gap_policy park: members 0, 1, 3, 4 (final) of G, seq 2 missing. 0 and 1 arrive;
    after gap_timeout_ms a SequenceGap event names 2 as missing, with 3 and 4 parked
    behind it; sending 2 (from another send queue) completes G, in order."""
    _, s, producer, queue = one_way(
        pipeline,
        "wait",
        ROUTER_ROUTING__GAP_TIMEOUT_MS="1500",
        ROUTER_ROUTING__DEFAULT_ORDER="logical",
    )
    a, b = s.topology.send_queues
    for i in (0, 1, 3, 4):
        producer.produce(
            a, f"G{i}".encode(), partition=0, headers=headers_for("G", seq=i, final=i == 4)
        )
    producer.flush(10)
    assert queue.until(b"G0", b"G1") == [b"G0", b"G1"]
    (gap,) = read_records(s, s.topology.events_topic, SEQUENCE_GAP, 1)
    assert (gap["guarantee_id"], gap["expected_seq"], gap["next_present_seq"]) == ("G", 2, 3)
    assert gap["outcome"] == "PARK" and gap["parked_messages"] == 2 and gap["waited_ms"] >= 1500
    producer.produce(b, b"G2", partition=0, headers=headers_for("G", seq=2))  # another queue
    producer.flush(10)
    assert queue.until(b"G4") == [b"G0", b"G1", b"G2", b"G3", b"G4"]
    queue.receiver.close()


def test_gap_policy_deliver_goes_past_the_gap_and_dead_letters_the_late_member(
    pipeline: PipelineFactory,
) -> None:
    """gap_policy deliver: members 0, 2, 3 (final) of G, 1 missing. After gap_timeout_ms
    the SequenceGap event says DELIVER and 2, 3 follow 0 in order; 1, arriving late, is
    dead-lettered as duplicate-seq, never delivered after the group."""
    _, s, producer, queue = one_way(
        pipeline,
        "wait",
        ROUTER_ROUTING__GAP_TIMEOUT_MS="1000",
        ROUTER_ROUTING__GAP_POLICY="deliver",
    )
    a, _ = s.topology.send_queues
    for i in (0, 2, 3):
        h = headers_for("G", seq=i, final=i == 3, **LOGICAL)
        producer.produce(a, f"G{i}".encode(), partition=0, headers=h)
    producer.flush(10)
    assert queue.until(b"G3") == [b"G0", b"G2", b"G3"]
    (gap,) = read_records(s, s.topology.events_topic, SEQUENCE_GAP, 1)
    assert (gap["expected_seq"], gap["next_present_seq"], gap["outcome"]) == (1, 2, "DELIVER")
    producer.produce(a, b"G1", partition=0, headers=headers_for("G", seq=1, **LOGICAL))
    producer.produce(a, b"after", partition=0, headers=headers_for(None))
    producer.flush(10)
    assert queue.until(b"after") == [b"G0", b"G2", b"G3", b"after"]
    dead = read_records(s, s.topology.dead_letter_topic, DEAD_LETTER, 1)
    assert dead[0]["reason_code"] == "duplicate-seq" and dead[0]["value"] == b"G1", dead
    queue.receiver.close()


def test_schema_of_sequence_gap_is_registered() -> None:
    assert schemas.load(SEQUENCE_GAP) is not None
