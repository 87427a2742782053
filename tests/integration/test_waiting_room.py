"""The waiting room (busy policy `wait`): a group that finds no clean destination waits
off its source partition, and is delivered whole, in order, once a destination frees.

One transfer partition and one receive queue, so a single open group makes everything busy.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from ops.harness.demo import run_pipeline_workload, summary
from ops.harness.pipeline import PipelineSpec
from ops.harness.workload import WorkloadSpec
from router import schemas
from router.clients import redis_client
from router.config import RouterSettings
from router.contract import headers_for
from router.events import DEAD_LETTER, GROUP_WAIT_TIMED_OUT
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


def _read(s: RouterSettings, topic: str, schema: str, want: int) -> list[dict[str, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": s.kafka.bootstrap_servers,
            "group.id": unique("read"),
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[dict[str, Any]] = []

    def enough() -> bool:
        m = consumer.poll(0.2)
        if (
            m is not None
            and m.error() is None
            and dict(m.headers() or []).get(schemas.SCHEMA_HEADER) == schema.encode()
        ):
            records.append(schemas.decode(schema, m.value()))
        return len(records) >= want

    wait_until(enough, 60, f"{want} {schema} records on {topic}")
    consumer.close()
    return records


def test_a_group_that_waits_too_long_is_dead_lettered_with_an_event(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(
        PipelineSpec(
            busy_policy="wait",
            **{**ONE_WAY, "sweepers": 1},  # type: ignore[arg-type]
            extra_env={
                "ROUTER_ROUTING__MAX_WAIT_MS": "1500",
                "ROUTER_ROUTING__WAIT_TIMEOUT_POLICY": "dead-letter",
                "ROUTER_SWEEPER__INTERVAL_MS": "300",
            },
        )
    )
    s = p.settings
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    queue = Queue(Receiver(s, group_id=unique("check"), assign=True))
    a, b = s.topology.send_queues
    producer.produce(a, b"A0", partition=0, headers=headers_for("A", seq=0))  # never ends
    producer.flush(10)
    queue.until(b"A0")
    producer.produce(b, b"B0", partition=0, headers=headers_for("B", seq=0))
    producer.produce(b, b"B1", partition=0, headers=headers_for("B", seq=1))
    producer.flush(10)
    (event,) = _read(s, s.topology.events_topic, GROUP_WAIT_TIMED_OUT, 1)
    assert (event["guarantee_id"], event["outcome"], event["side"]) == (
        "B",
        "DEAD_LETTERED",
        "SEND",
    )
    producer.produce(b, b"B2", partition=0, headers=headers_for("B", seq=2, final=True))
    producer.flush(10)
    dead = _read(s, s.topology.dead_letter_topic, DEAD_LETTER, 3)
    assert [d["value"] for d in dead] == [b"B0", b"B1", b"B2"]  # in order, none dropped
    assert {d["reason_code"] for d in dead} == {"group-stopped"}
    assert queue.values == [b"A0"]  # nothing of B entered A's path
    queue.receiver.close()
