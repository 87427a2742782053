"""The waiting room (busy policy `wait`): a group that finds no clean destination waits
off its source partition, and is delivered whole, in order, once a destination frees.

One transfer partition and one receive queue, so a single open group makes everything busy.
"""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition

from ops.harness.demo import run_pipeline_workload, summary
from ops.harness.pipeline import PipelineSpec
from ops.harness.workload import WorkloadSpec
from router.clients import redis_client
from router.contract import headers_for
from router.offsets import CommittedOffsets
from router.receiver import Receiver
from router.side import side_spec, table_for
from tests.conftest import PipelineFactory
from tests.helpers import unique, wait_until
from tests.integration.test_busy_policy import ONE_WAY, Queue


def test_a_group_waits_without_blocking_its_partition_and_arrives_whole_after(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(PipelineSpec(busy_policy="wait", **ONE_WAY))  # type: ignore[arg-type]
    s = p.settings
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    queue = Queue(Receiver(s, group_id=unique("check"), assign=True))
    a, b = s.topology.send_queues
    producer.produce(a, b"A0", partition=0, headers=headers_for("A", seq=0))
    producer.flush(10)
    queue.until(b"A0")
    # B and an ordinary message arrive while A holds the only destination: they wait in
    # the room, and the send queue's partition moves on past them (no head-of-line hold).
    producer.produce(b, b"B0", partition=0, headers=headers_for("B", seq=0))
    producer.produce(b, b"o", partition=0, headers=headers_for(None))
    producer.produce(b, b"B1", partition=0, headers=headers_for("B", seq=1, final=True))
    producer.flush(10)
    send = side_spec(s, "send")
    offsets = CommittedOffsets(s.kafka, unique("probe"))
    wait_until(
        lambda: offsets.read(send.group_id, [TopicPartition(b, 0)], timeout=10).get((b, 0), 0) >= 3,
        60,
        "the send queue's partition consumed past the waiting group",
    )
    send_table = table_for(s, "send", redis_client(s.redis))
    assert set(send_table.room()) == {"B", "~" + f"{b}/0"}
    producer.produce(a, b"A1", partition=0, headers=headers_for("A", seq=1, final=True))
    producer.flush(10)
    # A ends; B was first in the room, then the ordinary message: nothing interleaved.
    assert queue.until(b"A1", b"B0", b"B1", b"o") == [b"A0", b"A1", b"B0", b"B1", b"o"]
    assert send_table.stats().get("shared", 0) == 0
    wait_until(lambda: not send_table.entries(), 60, "every group released")
    queue.receiver.close()


def test_a_burst_of_groups_beyond_capacity_arrives_with_no_interleaving(
    pipeline: PipelineFactory,
) -> None:
    """Many more groups open at once than destinations on either side (3 transfer
    partitions, 3 receive queues; 8 senders each keeping 3 groups open), under `wait`:
    judged from what both sides hold, every message arrives once, in order, unsplit, and
    nothing is appended inside another group's open span."""
    p = pipeline(
        PipelineSpec(
            busy_policy="wait",
            send_units=1,
            receive_units=1,
            sweepers=0,
            send_queues=2,
            send_queue_partitions=2,
            transfer_partitions=3,
            receive_queues=3,
        )
    )
    workload = WorkloadSpec(
        run_id=p.name,
        senders=8,
        messages=1500,
        grouped_fraction=0.7,
        max_group=12,
        open_per_sender=3,
        rate=100,
    )
    result = run_pipeline_workload(p, workload, say=lambda _: None, timeout=300)
    r = result.report
    text = "\n".join(summary(result))
    print(text)
    assert r.groups_sent >= 100 and r.ordinary_sent > 0, text
    assert r.sent == workload.messages and r.received == r.sent, text
    assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
    assert r.send is not None and r.receive is not None, "both sides judged"
    assert (r.send.interleaved, r.receive.interleaved) == (0, 0), text
    assert all(code == 0 for code in result.exit_codes.values()), result.exit_codes
    assert not result.sender_failures and not result.undecodable, text
