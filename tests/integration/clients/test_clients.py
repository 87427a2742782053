"""The sender and receiver libraries, and topic creation, against the real broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from router.receiver import Receiver, ReceiveTimeout
from router.sender import Sender
from router.topology.topics import ensure_topics
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.helpers import unique, wait_until


def measured(sender: Sender, queue: str) -> None:
    """Until a sender's first measure of the backlog succeeds (partition 0 holds 10 old
    records): on a broker just started a new admin client's first request may time out,
    and a sender whose measure failed keeps its estimates (0 everywhere) and backs off."""
    wait_until(lambda: sender.backlog()[(queue, 0)] == 10, 90, "the sender's backlog measure")


def test_sender_picks_the_least_backlog_partition_and_keeps_a_group_on_it(
    topology: TopologyFactory,
) -> None:
    s = topology(topology={"send_queue_count": 1, "send_queue_partitions": 3})
    queue = s.topology.send_queues[0]
    raw = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    for partition, backlog in ((0, 10), (1, 5)):  # nobody consumes: all of it is backlog
        for _ in range(backlog):
            raw.produce(queue, b"old", partition=partition)
    raw.flush(10)

    # Backlog measured once, then estimated locally; no slack: strictly the least backlog.
    sender = Sender.from_settings(s, backlog_refresh_s=3600, sticky_slack=0)
    measured(sender, queue)
    receipts = [sender.send(b"line", guarantee_id="g1", final=i == 19) for i in range(20)]
    assert {(r.topic, r.partition) for r in receipts} == {(queue, 2)}
    assert [r.seq for r in receipts] == list(range(20))
    # Now partition 2 has the most backlog (20), partition 1 the least (5).
    assert sender.send(b"next", guarantee_id="g2").partition == 1
    open_now = sender.open_groups()
    assert list(open_now) == ["g2"]
    assert (open_now["g2"].topic, open_now["g2"].partition, open_now["g2"].next_seq) == (
        queue,
        1,
        1,
    )
    sender.flush(10)
    # With a slack, a sender's next group stays where its last one went while that
    # partition's backlog is within the slack of the least.
    # backlog_refresh_s=0: measures on every new group
    sticky = Sender.from_settings(s, backlog_refresh_s=0, sticky_slack=20)
    measured(sticky, queue)
    assert sticky.send(b"a", guarantee_id="s1", final=True).partition == 1  # 6: the least
    sticky.flush(10)
    for _ in range(5):
        raw.produce(queue, b"other sender", partition=1)
    raw.flush(10)
    # Backlogs now 10, 12, 20: partition 0 is least, but 12 <= 10 + 20 keeps partition 1.
    assert sticky.send(b"b", guarantee_id="s2", final=True).partition == 1
    strict = Sender.from_settings(s, backlog_refresh_s=0, sticky_slack=0)
    measured(strict, queue)
    strict.send(b"c", guarantee_id="s3", final=True)
    assert strict.send(b"d", guarantee_id="s4", final=True).partition == 0
    sticky.flush(10)
    strict.flush(10)

    consumer = Consumer(
        {
            "bootstrap.servers": s.kafka.bootstrap_servers,
            "group.id": unique("read"),
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(queue, 2, 0)])
    seqs: list[int] = []

    def all_read() -> bool:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            seqs.append(int(dict(m.headers())["guarantee-seq"]))
        return len(seqs) == 20

    wait_until(all_read, 30, "the group on partition 2")
    consumer.close()
    assert seqs == list(range(20))


def test_receiver_commits_only_what_was_processed(topology: TopologyFactory) -> None:
    s = topology()
    queue = s.topology.receive_queues[0]
    producer = Producer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "transactional.id": unique("txn")}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(queue, f"m{i}".encode(), partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(queue, b"aborted", partition=0)
    producer.abort_transaction(30)

    group = unique("app")
    first = Receiver.from_settings(s, [queue], group_id=group)
    got: list[bytes | None] = []
    assert first.process(lambda m: got.append(m.value), max_messages=3, idle_timeout=30) == 3
    first.close()
    assert got == [b"m0", b"m1", b"m2"]

    second = Receiver.from_settings(s, [queue], group_id=group)
    assert second.receive(30).value == b"m3"  # resumes after the last processed message
    assert second.receive(30).value == b"m4"
    with pytest.raises(ReceiveTimeout):
        second.receive(1.0)  # the aborted record is never delivered
    second.close()


def test_receive_raises_its_timeout_within_ten_percent_of_the_time_asked(
    topology: TopologyFactory,
) -> None:
    """Receive with a wait time (seed 001's "receive with wait"): on an empty queue,
    `receive(t)` raises ReceiveTimeout no sooner than t and within 10% after it, whether
    the group is still joining (the first call) or settled (the second)."""
    s = topology()
    queue = s.topology.receive_queues[0]
    receiver = Receiver.from_settings(s, [queue], group_id=unique("wait"))
    try:
        for asked in (3.0, 1.5):
            started = time.monotonic()
            with pytest.raises(ReceiveTimeout, match=f"within {asked}s"):
                receiver.receive(asked)
            took = time.monotonic() - started
            assert asked <= took <= asked * 1.1, f"receive({asked}) raised after {took:.3f}s"
    finally:
        receiver.close()


def test_topics_create_is_idempotent_and_grows_the_transfer_topic(
    topology: TopologyFactory, admin: AdminClient
) -> None:
    s = topology(topology={"receive_units": 3})
    again = ensure_topics(s, admin)
    assert again.created == [] and again.grown == [] and again.warnings == []
    more = s.model_copy(update={"topology": s.topology.model_copy(update={"receive_units": 5})})
    report = ensure_topics(more, admin)
    assert report.grown == [s.topology.transfer_topic]

    def five_partitions() -> bool:
        meta = admin.list_topics(s.topology.transfer_topic, timeout=10)
        return len(meta.topics[s.topology.transfer_topic].partitions) == 5

    wait_until(five_partitions, 30, "the transfer topic to show 5 partitions")
    fewer_send = s.model_copy(
        update={"topology": s.topology.model_copy(update={"send_queue_partitions": 7})}
    )
    assert any("send queue" in w for w in ensure_topics(fewer_send, admin).warnings)
