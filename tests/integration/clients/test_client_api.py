"""The client libraries as a confluent-kafka user meets them, and other clients' route in,
against the real broker, Redis and unit processes.

`Sender` and `Receiver` from a plain librdkafka dict, as context managers, with a
caller's own `guarantee-seq`, batch reads and commits before a rebalance moves
partitions; and the README's worked examples for Kafka's own Java console producer and
kcat: each group arrives complete, in order, on one receive queue (read_committed)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from confluent_kafka import Producer, TopicPartition

from ops.harness.stack.pipeline import PipelineSpec
from router.backends.kafka.offsets import CommittedOffsets
from router.receiver import Hook, Received, Receiver
from router.sender import Sender
from tests.fixtures.factories import PipelineFactory, TopologyFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.paths import ROOT
from tests.fixtures.queues import Queues

SMALL = PipelineSpec(
    send_units=1,
    receive_units=1,
    sweepers=0,
    send_queues=2,
    send_queue_partitions=3,
    transfer_partitions=2,
    receive_queues=3,
)


def test_sender_and_receiver_from_a_plain_config_dict_carry_groups_whole_and_in_order(
    pipeline: PipelineFactory,
) -> None:
    """A `Sender` and a `Receiver` built from `{"bootstrap.servers": ...}` and the
    topology's name, used as context managers: three groups sent interleaved, one of them
    numbered by the caller in its own `guarantee-seq` headers, and an ordinary message.
    A wrong number is refused with a ValueError before anything is sent. The receiver's
    batches hold every group complete, in order, on one queue; leaving its block commits
    one past the last message of each queue."""
    p = pipeline(SMALL)
    s = p.settings
    kafka = {"bootstrap.servers": s.kafka.bootstrap_servers}
    with Sender(kafka, s.topology.name) as sender:
        assert sender.send_queues == s.topology.send_queues
        for i in range(4):
            final = i == 3
            sender.send(f"a{i}".encode(), guarantee_id="A", final=final)
            own = [("guarantee-seq", str(i).encode()), ("app", b"kept")]
            sender.send(f"b{i}".encode(), guarantee_id="B", final=final, headers=own)
            if i == 1:
                with pytest.raises(ValueError, match="its next number is 2"):
                    sender.send(b"wrong", guarantee_id="B", headers=[("guarantee-seq", b"5")])
                sender.send(b"ordinary")
            sender.send(f"c{i}".encode(), headers=[("guarantee-id", b"C")], final=final)
    assert sender.sent == sender.delivered == 13

    group_id = unique("app")
    got: list[Received] = []
    with Receiver({**kafka, "group.id": group_id}, s.topology.name) as receiver:
        assert receiver.queues == s.topology.receive_queues

        def all_in() -> bool:
            batch = receiver.consume(100, timeout=0.5)
            for m in batch:
                receiver.done(m)
            got.extend(batch)
            return len(got) >= 13

        wait_until(all_in, 90, "13 messages through the units")
    by_group: dict[str | None, list[Received]] = {}
    for m in got:
        by_group.setdefault(m.guarantee_id, []).append(m)
    assert [m.value for m in by_group[None]] == [b"ordinary"]
    for g in "ABC":
        members = by_group[g]
        assert [m.value for m in members] == [f"{g.lower()}{i}".encode() for i in range(4)]
        assert [m.seq for m in members] == [0, 1, 2, 3]
        assert [m.final for m in members] == [False, False, False, True]
        assert len({m.topic for m in members}) == 1, (g, [m.topic for m in members])
        offsets = [m.offset for m in members]
        assert offsets == sorted(offsets)
    assert all(("app", b"kept") in m.headers for m in by_group["B"])
    last: dict[tuple[str, int], int] = {}
    for m in got:
        last[(m.topic, m.partition)] = max(last.get((m.topic, m.partition), -1), m.offset)
    committed = CommittedOffsets(kafka, unique("probe")).read(group_id, list(last), timeout=10)
    assert committed == {tp: offset + 1 for tp, offset in last.items()}


def test_a_rebalance_commits_what_was_done_before_the_partitions_move(
    topology: TopologyFactory,
) -> None:
    """Auto-commit off, so only the receiver's own commits count. A receiver has 10
    messages from each of two queues and has finished all but the 6th of each. A second
    member joins the group: before the first gives up its partitions, its `on_revoke`
    hook runs (and finishes the 6th message of the first queue), then what is done is
    committed: everything on the first queue, up to the unfinished 6th on the second,
    never past it, where the new owners start."""
    s = topology(topology={"receive_queue_count": 2})
    q1, q2 = s.topology.receive_queues
    raw = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    for q in (q1, q2):
        for i in range(10):
            raw.produce(q, f"{q}-{i}".encode(), partition=0)
    assert raw.flush(30) == 0
    kafka = {
        "bootstrap.servers": s.kafka.bootstrap_servers,
        "enable.auto.commit": False,
        "partition.assignment.strategy": "roundrobin",  # one queue each after the join
    }
    group_id = unique("app")
    events: list[tuple[str, str, list[str]]] = []
    held: dict[str, Received] = {}

    def hook(name: str, kind: str) -> Hook:
        def record(r: Receiver, parts: list[TopicPartition]) -> None:
            events.append((name, kind, sorted(tp.topic for tp in parts)))
            mine = name == "first" and kind == "revoke" and q1 in {tp.topic for tp in parts}
            if mine and q1 in held:
                r.done(held.pop(q1))  # finished while the partition is still ours

        return record

    first = Receiver(
        {**kafka, "group.id": group_id},
        queues=[q1, q2],
        on_assign=hook("first", "assign"),
        on_revoke=hook("first", "revoke"),
    )
    got: list[Received] = []

    def twenty() -> bool:
        got.extend(first.consume(50, 0.5))
        return len(got) == 20

    wait_until(twenty, 60, "20 messages")
    assert events == [("first", "assign", [q1, q2])]
    for m in got:
        if m.offset == 5:
            held[m.topic] = m  # the 6th message: not finished yet
        else:
            first.done(m)

    second = Receiver(
        {**kafka, "group.id": group_id},
        queues=[q1, q2],
        on_assign=hook("second", "assign"),
    )

    def rebalanced() -> bool:
        first.poll(0.1)
        second.poll(0.1)
        return any(e[:2] == ("second", "assign") and e[2] for e in events)

    wait_until(rebalanced, 90, "the second member to get partitions", report=lambda: str(events))
    assert ("first", "revoke", [q1, q2]) in events
    parts = [TopicPartition(q1, 0), TopicPartition(q2, 0)]
    probe = CommittedOffsets(s.kafka, unique("probe"))
    assert probe.read(group_id, parts, timeout=10) == {(q1, 0): 10, (q2, 0): 5}
    first.close()
    second.close()
    probe.close()


def _console_producer(bootstrap: str, topic: str, lines: list[str]) -> None:
    """Kafka's own Java console producer, as the README shows it."""
    command = [
        str(ROOT / "ops" / "stack.sh"),
        "console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--property",
        "parse.headers=true",
        "--property",
        "parse.key=true",
        "--property",
        "headers.delimiter=|",
        "--property",
        "key.separator=|",
    ]
    done = subprocess.run(
        command,
        input="".join(f"{x}\n" for x in lines),
        text=True,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


def _kcat(bootstrap: str, topic: str, gid: str, seq: int, final: bool, value: str) -> None:
    """kcat, one message per call, as the README shows it."""
    headers = ["-H", f"guarantee-id={gid}", "-H", f"guarantee-seq={seq}"]
    headers += ["-H", "guarantee-final=true"] if final else []
    command = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-k", gid, *headers]
    done = subprocess.run(
        command, input=value, text=True, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


def _java_console_producer_available() -> bool:
    if shutil.which("java") is None:
        return False
    cached = any((ROOT / ".cache" / "jars").glob("kafka-tools-*/.complete"))
    return cached or shutil.which("mvn") is not None


@pytest.mark.parametrize("client", ["java-console-producer", "kcat"])
def test_a_group_sent_by_another_client_arrives_whole_in_order_on_one_receive_queue(
    pipeline: PipelineFactory, client: str
) -> None:
    """The README's worked examples, run for real: two groups of four lines, interleaved,
    sent with the routing headers (`guarantee-id`, `guarantee-seq`, `guarantee-final` on
    the last) and the group ID as the record key (one send-queue partition per group),
    by Kafka's Java console producer (`parse.headers=true`) or by kcat (`-H`), into a
    send queue of running units. Read back from the receive queues (read_committed):
    each group complete, in order, on one receive queue."""
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (ops/stack.sh up installs it when run as root)")
    if client == "java-console-producer" and not _java_console_producer_available():
        pytest.skip("the Java console producer needs Java (and Maven once, for its jar)")
    p = pipeline(SMALL)
    s = p.settings
    bootstrap = s.kafka.bootstrap_servers
    queue = s.topology.send_queues[0]
    groups = {g: f"{g}-{unique('order')}" for g in "AB"}
    sent = [(gid, i, i == 3, f"{g} line {i}") for i in range(4) for g, gid in groups.items()]
    if client == "java-console-producer":
        lines = []
        for gid, seq, final, value in sent:
            headers = f"guarantee-id:{gid},guarantee-seq:{seq}"
            headers += ",guarantee-final:true" if final else ""
            lines.append(f"{headers}|{gid}|{value}")
        _console_producer(bootstrap, queue, lines)
    else:
        for gid, seq, final, value in sent:
            _kcat(bootstrap, queue, gid, seq, final, value)

    queues = Queues(s)
    queues.read_until(len(sent))
    for g, gid in groups.items():
        where = {q for q, msgs in queues.by_queue.items() for m in msgs if m[0] == gid}
        assert len(where) == 1, f"group {gid} on {where}"
        arrived = [(seq, v) for m_gid, seq, v in queues.by_queue[where.pop()] if m_gid == gid]
        assert arrived == [(i, f"{g} line {i}".encode()) for i in range(4)]
    assert sorted(queues.values()) == sorted(v.encode() for *_, v in sent)
