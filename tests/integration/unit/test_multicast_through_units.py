"""Point-to-point and multicast (seed 001), through real units on the real broker and Redis:

* a plain confluent-kafka producer with only the documented headers, and the Python
  Sender, send multicast messages between ordinary ones and groups: each reaches every
  receive queue (or the ones it names) exactly once, read_committed, judged by the
  harness's verdict (lost, duplicated, unexpected, interleaved by the capacity rule);
* a copy for a queue with an open group lands there only after the group's final, while
  the other queues get theirs at once;
* a fan-out whose transaction fails (a copy the broker refuses), or whose unit is killed
  after producing the copies, never shows a partial fan-out to read_committed readers;
* a bad subset, or a group's member made multicast, is dead-lettered with its reason.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Literal

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from ops.harness.verdict.records import Seen, Sent
from ops.harness.verdict.sides import CapacitySpec
from ops.harness.verdict.verify import Report, verify
from router import contract
from router.backends.redis.client import redis_client
from router.config import RoutingSettings
from router.contract import events, headers_for, multicast, schemas
from router.sender import Sender
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory, TopologyFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.inprocess import (
    committed,
    limit_record_size,
    read_records,
    send,
    started_unit,
    step_until,
    stop,
)

SPEC = PipelineSpec(
    send_units=1,
    receive_units=1,
    sweepers=0,
    send_queues=1,
    send_queue_partitions=2,
    transfer_partitions=2,
    receive_queues=3,
)
Headers = list[tuple[str, bytes]]
MULTICAST: Headers = [(multicast.DELIVERY, b"multicast")]


def payload(event_id: str) -> bytes:
    """The event ID and the sender's clock (the judge's send-side decision windows)."""
    return f"{event_id}|{int(time.time() * 1000)}".encode()


def event(value: bytes | None) -> str:
    return (value or b"").decode(errors="replace").split("|")[0]


def seen(dest: str, m: Message) -> Seen:
    r = contract.parse(m.headers(), RoutingSettings())
    created = int(m.value().decode().split("|")[1])
    append = m.timestamp()[1]
    gid, seq, final = r.guarantee_id, r.seq or 0, r.final
    return Seen(dest, m.offset(), event(m.value()), gid, seq, final, None, append, created)


def judged(p: Pipeline, sent: list[Sent]) -> Report:
    """The harness's verdict over both sides, read to the end (read_committed)."""
    t = p.settings.topology
    transfer = {f"transfer[{i}]": TopicPartition(t.transfer_topic, i) for i in range(2)}
    queues = {q: TopicPartition(q, 0) for q in t.receive_queues}
    read = read_to_end(p.settings.kafka, {**transfer, **queues}, timeout=60)
    forwarded = [seen(n, m) for n in transfer for m in read[n] if m.value() is not None]
    received = [seen(q, m) for q in queues for m in read[q]]
    cap = CapacitySpec(tuple(transfer), tuple(queues))
    return verify(sent, received, forwarded=forwarded, capacity=cap)


def events_on(p: Pipeline, queue: str) -> list[str]:
    """The event IDs `queue` holds, in order (read_committed, to its end)."""
    read = read_to_end(p.settings.kafka, {queue: TopicPartition(queue, 0)}, timeout=60)
    return [event(m.value()) for m in read[queue]]


def read_uncommitted(bootstrap: str, topic: str) -> list[bytes]:
    """Every value on `topic`'s partition 0 up to its high watermark, aborted ones too."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("dirty"),
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    out: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        _, end = c.get_watermark_offsets(tp, timeout=10)
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        # the last offsets may be transaction markers, which are never returned
        while c.position([tp])[0].offset < end:
            assert time.monotonic() < deadline, f"{topic} not read to {end}"
            out += [m.value() or b"" for m in c.consume(100, 0.5) if m.error() is None]
    finally:
        c.close()
    return out


def test_multicast_from_a_plain_producer_and_the_sender_reaches_each_queue_once(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(SPEC)
    t = p.settings.topology
    q1, q2, q3 = t.receive_queues
    queue = t.send_queues[0]
    subsets: list[tuple[Headers, tuple[str, ...]]] = [
        (MULTICAST, (q1, q2, q3)),
        ([*MULTICAST, (multicast.QUEUES, f"{q3}, {q1}".encode())], (q1, q3)),
        ([*MULTICAST, (multicast.QUEUES, q2.encode())], (q2,)),
    ]
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers})
    sent: list[Sent] = []
    # Groups, ordinary messages and multicast ones (to every queue, to two, to one),
    # interleaved on the two partitions of the send queue, with the documented headers.
    for i in range(4):
        for seq in range(3):
            gid, final = f"g{i}", seq == 2
            producer.produce(
                queue,
                payload(f"{gid}-{seq}"),
                partition=i % 2,
                headers=headers_for(gid, seq=seq, final=final),
            )
            producer.produce(queue, payload(f"o{i}-{seq}"), partition=seq % 2)
            headers, targets = subsets[seq]
            producer.produce(
                queue, payload(f"m{i}-{seq}"), partition=(i + seq) % 2, headers=headers
            )
            sent += [
                Sent(f"{gid}-{seq}", gid, seq, final),
                Sent(f"o{i}-{seq}", None, 0, False),
                Sent(f"m{i}-{seq}", None, 0, False, targets),
            ]
    # Bad input: a name that is not one of the topology's queues; a group's member.
    unknown = [*MULTICAST, (multicast.QUEUES, f"{q1},orders".encode())]
    producer.produce(queue, payload("bad-name"), partition=0, headers=unknown)
    in_group = [*headers_for("b", seq=0, final=True), *MULTICAST]
    producer.produce(queue, payload("bad-group"), partition=0, headers=in_group)
    assert producer.flush(30) == 0
    # The Python Sender: the same headers through `headers=`, checked before sending.
    with Sender({"bootstrap.servers": p.settings.kafka.bootstrap_servers}, t.name) as sender:
        for i in range(3):
            sender.send(payload(f"s-all-{i}"), headers=multicast.headers())
            sender.send(payload(f"s-two-{i}"), headers=multicast.headers([q2, q3]))
            sender.send(payload(f"s-o-{i}"))
            sent += [
                Sent(f"s-all-{i}", None, 0, False, (q1, q2, q3)),
                Sent(f"s-two-{i}", None, 0, False, (q2, q3)),
                Sent(f"s-o-{i}", None, 0, False),
            ]
    expected = sum(len(s.queues or "x") for s in sent)

    def arrived() -> int | None:
        n = sum(len(events_on(p, q)) for q in t.receive_queues)
        return n if n >= expected else None

    wait_until(arrived, 120, f"{expected} records on the receive queues")
    assert all(code == 0 for code in p.stop().values()), p.exit_codes
    report = judged(p, sent)
    assert report.violations() == [], report
    assert (report.sent, report.received, report.multicast_sent) == (expected, expected, 18)
    assert report.send is not None and report.receive is not None  # both sides judged
    held = {q: events_on(p, q) for q in t.receive_queues}
    for s in sent:  # on each of its queues exactly once, on no other
        if s.queues is not None:
            assert {q for q in held if s.event_id in held[q]} == set(s.queues), s
            assert all(held[q].count(s.event_id) == 1 for q in s.queues), s
    dlq = t.dead_letter_topic
    read = read_to_end(p.settings.kafka, {dlq: TopicPartition(dlq, 0)}, timeout=60)[dlq]
    letters = [schemas.decode(events.DEAD_LETTER, m.value()) for m in read]
    dead = {event(d["value"]): d for d in letters}
    assert set(dead) == {"bad-name", "bad-group"}
    assert dead["bad-name"]["reason_code"] == "unknown-queue"
    assert "'orders'" in dead["bad-name"]["reason"] and q1 in dead["bad-name"]["reason"]
    assert dead["bad-group"]["reason_code"] == "multicast-in-group"
    assert {d["source_topic"] for d in dead.values()} == {queue}  # at the first hop


@pytest.mark.parametrize("policy", ["share", "wait"])
def test_a_copy_for_a_queue_with_an_open_group_lands_after_its_final(
    pipeline: PipelineFactory, policy: Literal["share", "wait"]
) -> None:
    p = pipeline(dataclasses.replace(SPEC, receive_queues=2, busy_policy=policy))
    t = p.settings.topology
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers})
    queue = t.send_queues[0]
    producer.produce(queue, payload("G0"), partition=0, headers=headers_for("G", seq=0))
    producer.flush(10)
    busy = wait_until(
        lambda: next((q for q in t.receive_queues if events_on(p, q)), None), 60, "G0 on a queue"
    )
    (free,) = set(t.receive_queues) - {busy}
    producer.produce(queue, payload("M"), partition=1, headers=multicast.headers())
    producer.flush(10)
    # The free queue gets its copy at once; the busy one's waits in the receive side's
    # waiting room, for that queue only.
    wait_until(lambda: "M" in events_on(p, free), 60, "M's copy on the free queue")
    receive = table_for(p.settings, "receive", redis_client(p.settings.redis))
    assert list(receive.room()) == [f"~*{busy}"]
    assert events_on(p, busy) == ["G0"]
    final = headers_for("G", seq=1, final=True)
    producer.produce(queue, payload("G1"), partition=0, headers=final)
    producer.flush(10)
    wait_until(lambda: "M" in events_on(p, busy), 60, "M's copy on the busy queue")
    assert events_on(p, busy) == ["G0", "G1", "M"]  # after G's final, never inside its span
    assert events_on(p, free) == ["M"]
    wait_until(lambda: not receive.entries(), 30, "the copies' pseudo-group released")


def test_a_failed_fan_out_transaction_shows_no_copy_and_its_replay_dead_letters_it(
    topology: TopologyFactory, admin: AdminClient
) -> None:
    """One receive unit in this process. A large multicast message whose copy the third
    queue refuses (its max.message.bytes lowered below the router's limit): the copies to
    the other queues were produced inside the transaction that then failed and aborted.
    read_committed readers never see any of them; the replay dead-letters the message
    (rejected-by-broker) and forwards the small multicast message of the same batch to
    every queue once."""
    s = topology(topology={"receive_units": 1, "receive_queue_count": 3})
    q1, q2, q3 = s.topology.receive_queues
    limit_record_size(admin, q3, 20_000)
    bootstrap, transfer = s.kafka.bootstrap_servers, s.topology.transfer_topic
    big = os.urandom(100_000)
    send(bootstrap, transfer, [(0, b"small", MULTICAST), (0, big, MULTICAST), (0, b"after", [])])
    unit = started_unit(s, "receive", partitions=1)
    try:
        group = s.topology.receive_group
        step_until(unit, lambda: committed(s.kafka, group, transfer, 0) == 3, 90, "the replay")
    finally:
        stop(unit)
    held = {q: [v for v, _ in read_records(bootstrap, q)] for q in (q1, q2, q3)}
    assert [held[q].count(b"small") for q in (q1, q2, q3)] == [1, 1, 1]
    assert all(big not in held[q] for q in (q1, q2, q3)), "a partial fan-out is visible"
    assert sum(held[q].count(b"after") for q in (q1, q2, q3)) == 1
    # The failed attempt did put copies on q1 and q2, inside its aborted transaction.
    assert big in read_uncommitted(bootstrap, q1) + read_uncommitted(bootstrap, q2)
    dead = read_records(bootstrap, s.topology.dead_letter_topic)
    assert [dict(h).get("reason") for _, h in dead] == [b"rejected-by-broker"]


def test_a_unit_killed_after_producing_its_copies_leaves_no_partial_fan_out(
    pipeline: PipelineFactory,
) -> None:
    """G is open on one queue. A receive unit takes multicast messages, writes the copies
    for the free queues, parks the ones for G's queue in the waiting room, and is killed
    (SIGKILL) with all of it on the broker in its open transaction. Nothing of it reaches
    read_committed readers; the unit that takes over writes every copy once, those for
    G's queue after G's final."""
    p = pipeline(SPEC, start=False)
    p.prepare()
    p.fleet.start("send-unit")
    (first,) = p.fleet.start("receive-unit")
    t = p.settings.topology
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers})
    queue = t.send_queues[0]
    producer.produce(queue, payload("G0"), partition=0, headers=headers_for("G", seq=0))
    producer.flush(10)
    busy = wait_until(
        lambda: next((q for q in t.receive_queues if events_on(p, q)), None), 90, "G0 on a queue"
    )
    free = [q for q in t.receive_queues if q != busy]
    assert first.stop() == 0
    (doomed,) = p.fleet.start("receive-unit", env={"ROUTER_FAULTS": "after_produce=1.0"})
    ms = [f"M{i}" for i in range(5)]
    for m in ms:
        producer.produce(queue, payload(m), partition=1, headers=multicast.headers())
    producer.flush(10)
    wait_until(lambda: not doomed.alive, 90, "the unit to kill itself after producing")
    assert doomed.popen.returncode == -9
    bootstrap = p.settings.kafka.bootstrap_servers
    dirty = [event(v) for q in free for v in read_uncommitted(bootstrap, q)]
    assert dirty and set(dirty) <= set(ms), dirty  # copies on the broker, never committed
    # read_committed: nothing of the killed transaction (aborted by its timeout)
    assert [events_on(p, q) for q in free] == [[], []]
    assert events_on(p, busy) == ["G0"]
    p.fleet.start("receive-unit")
    wait_until(
        lambda: all(events_on(p, q) == ms for q in free), 90, "each free queue's copies, once"
    )
    assert events_on(p, busy) == ["G0"]
    final = headers_for("G", seq=1, final=True)
    producer.produce(queue, payload("G1"), partition=0, headers=final)
    producer.flush(10)
    wait_until(lambda: len(events_on(p, busy)) == 2 + len(ms), 60, "the busy queue's copies")
    assert events_on(p, busy) == ["G0", "G1", *ms]
    assert all(events_on(p, q) == ms for q in free)
