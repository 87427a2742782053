"""Redelivery at the head and the delivery limit (seed 002), against the real broker,
Redis and, for the first test, running unit processes.

* `Receiver.abandon(message)`: that message comes again first, then the later ones of its
  partition in order, and no commit passes it; for groups sent by a plain confluent-kafka
  producer (documented headers only) and by `Sender`, through the units.
* A handler raising inside `Receiver.process` gets the message again.
* Counts live in Redis: abandoned across a receiver restart, the message reaches
  `max_deliveries`, is dead-lettered with reason `max-deliveries` (its original headers
  kept) and the receiver moves on; a receiver that dies after writing the dead letter but
  before committing does not hand the message out again, nor dead-letter it twice.
* A grouped message at the limit follows its group's poison policy: `stop-group` dead-
  letters the rest of the group (`group-stopped`, also after a restart) with a
  GroupStopped event; `dead-letter` lets the group go on without it.

Judged from what the receiver hands to the application, the committed offsets and the
dead-letter and events topics, never from counters.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from confluent_kafka import Producer, TopicPartition

from ops.harness.stack.pipeline import PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from router import contract
from router.backends.kafka.offsets import CommittedOffsets
from router.config import RouterSettings
from router.contract import events, schemas
from router.receiver import Received, Receiver, ReceiveTimeout
from router.sender import Sender
from tests.fixtures.factories import PipelineFactory, TopologyFactory
from tests.fixtures.helpers import unique, wait_until

SMALL = PipelineSpec(
    send_units=1,
    receive_units=1,
    sweepers=0,
    send_queues=1,
    send_queue_partitions=1,
    transfer_partitions=2,
    receive_queues=2,
)
Headers = list[tuple[str, bytes]]
TP = tuple[str, int]
WAIT = 60.0  # the longest wait for a message (a consumer group joining on a loaded machine)


def member(gid: str, seq: int, last: int, extra: Headers | None = None) -> Headers:
    """A group member's documented headers (and the application's `extra`)."""
    return [*contract.headers_for(gid, seq=seq, final=seq == last), *(extra or [])]


def write(s: RouterSettings, topic: str, messages: list[tuple[bytes, Headers]]) -> None:
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers, "acks": "all"})
    for value, headers in messages:
        producer.produce(topic, value, partition=0, headers=headers)
    assert producer.flush(30) == 0


def router_records(s: RouterSettings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The dead letters and GroupStopped events of the topology, read to their end."""
    t = s.topology
    read = read_to_end(
        s.kafka,
        {
            "dlq": TopicPartition(t.dead_letter_topic, 0),
            "events": TopicPartition(t.events_topic, 0),
        },
    )
    letters = [schemas.decode(events.DEAD_LETTER, m.value()) for m in read["dlq"]]
    for m, letter in zip(read["dlq"], letters, strict=True):
        assert dict(m.headers())["reason"] == letter["reason_code"].encode()
    stopped = [
        schemas.decode(events.GROUP_STOPPED, m.value())
        for m in read["events"]
        if dict(m.headers() or []).get(schemas.SCHEMA_HEADER) == events.GROUP_STOPPED.encode()
    ]
    return letters, stopped


def committed(s: RouterSettings, group: str, parts: list[TP]) -> dict[TP, int]:
    probe = CommittedOffsets(s.kafka, unique("probe"))
    try:
        return probe.read(group, parts, timeout=10)
    finally:
        probe.close()


def test_abandoned_messages_come_again_first_then_the_later_ones_in_order(
    pipeline: PipelineFactory,
) -> None:
    """Two groups of 6 through running units: "plain", from a confluent-kafka producer
    with only the documented headers, and "lib", from `Sender`. A receiver reading in
    batches abandons member 2 of each the first time it sees it (and leaves the rest of
    that partition's batch, as the README shows). Right then a commit stays at or below
    the abandoned offset. The next message the receiver hands out from that partition is
    member 2 again (its second delivery), then 3, 4, 5: each group is completed once, in
    order; leaving the block commits one past each queue's last message."""
    p = pipeline(SMALL)
    s = p.settings
    kafka = {"bootstrap.servers": s.kafka.bootstrap_servers}
    write(
        s,
        s.topology.send_queues[0],
        [(f"plain-{i}".encode(), member("plain", i, 5, [("app", b"kept")])) for i in range(6)],
    )
    with Sender(kafka, s.topology.name) as sender:
        for i in range(6):
            sender.send(f"lib-{i}".encode(), guarantee_id="lib", final=i == 5)

    group = unique("app")
    handed: dict[TP, list[tuple[str | None, int | None, int]]] = {}
    last: dict[TP, int] = {}  # the last offset handed out per partition
    completed: dict[str, list[int]] = {"plain": [], "lib": []}
    abandoned: dict[str, Received] = {}
    with Receiver({**kafka, "group.id": group}, s.topology.name) as receiver:

        def step() -> bool:
            failed: set[TP] = set()
            for m in receiver.consume(100, timeout=0.5):
                tp = (m.topic, m.partition)
                if tp in failed:
                    continue  # handed out after an abandoned message: it comes again
                handed.setdefault(tp, []).append((m.guarantee_id, m.seq, receiver.deliveries(m)))
                last[tp] = max(last.get(tp, -1), m.offset)
                gid = str(m.guarantee_id)
                if m.seq == 2 and gid not in abandoned:
                    abandoned[gid] = m
                    receiver.abandon(m)
                    failed.add(tp)
                    receiver.commit()
                    at = committed(s, group, [tp]).get(tp, 0)
                    assert at <= m.offset, f"committed {at} past abandoned {m.offset}"
                    continue
                completed[gid].append(int(m.seq or 0))
                receiver.done(m)
            return all(len(v) == 6 for v in completed.values())

        wait_until(step, 180, "both groups through the units", report=lambda: str(handed))
    for gid, seqs in completed.items():
        assert seqs == list(range(6)), (gid, seqs)
    for gid, m in abandoned.items():
        seen = handed[(m.topic, m.partition)]
        first = seen.index((gid, 2, 1))
        later = [x for x in seen[first + 1 :] if x[0] == gid]
        assert later == [(gid, 2, 2), (gid, 3, 1), (gid, 4, 1), (gid, 5, 1)], seen
    # Both groups may share a receive queue (one after the other): one past its last.
    ends = {tp: offset + 1 for tp, offset in last.items()}
    assert committed(s, group, list(handed)) == ends
    letters, _ = router_records(s)
    assert letters == []


def test_a_handler_that_raises_in_process_gets_the_message_again(
    topology: TopologyFactory,
) -> None:
    """`process(handler)`: the handler raises on m2 the first time; m2 is handed over
    again at once, then m3 and m4; all five are committed."""
    s = topology()
    queue = s.topology.receive_queues[0]
    write(s, queue, [(f"m{i}".encode(), []) for i in range(5)])
    calls: list[bytes | None] = []

    def handler(m: Received) -> None:
        calls.append(m.value)
        if m.value == b"m2" and calls.count(b"m2") == 1:
            raise RuntimeError("downstream unavailable")

    group = unique("app")
    with Receiver.from_settings(s, [queue], group_id=group) as receiver:
        assert receiver.process(handler, max_messages=5, idle_timeout=WAIT) == 5
    assert calls == [b"m0", b"m1", b"m2", b"m2", b"m3", b"m4"]
    assert committed(s, group, [(queue, 0)]) == {(queue, 0): 5}


def test_counts_survive_a_restart_and_the_limit_dead_letters_and_moves_on(
    topology: TopologyFactory, redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    """max_deliveries=3, counts in Redis. Receiver A abandons m1 twice and closes; B
    (same group) gets m1 a third time (it says so), abandons it: dead-lettered with
    `max-deliveries` and the original key, value and headers, and B hands out m2 next. B
    then dies before committing; C reads from the committed offset: m1 is neither handed
    out nor dead-lettered again, C goes on with m2."""
    s = topology()
    queue = s.topology.receive_queues[0]
    write(s, queue, [(f"m{i}".encode(), [("app", f"h{i}".encode())]) for i in range(5)])
    group = unique("app")
    conf = {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group}

    def receiver(**extra: Any) -> Receiver:
        return Receiver(
            {**conf, **extra.pop("config", {})},
            s.topology.name,
            queues=[queue],
            state=redis_url,
            state_prefix=redis_prefix,
            max_deliveries=3,
            **extra,
        )

    with receiver() as a:
        m0 = a.receive(WAIT)
        a.done(m0)
        for attempt in (1, 2):
            m1 = a.receive(WAIT)
            assert (m1.value, a.deliveries(m1)) == (b"m1", attempt)
            a.abandon(m1)
    key = f"{redis_prefix}:{{receiver:{group}}}:deliveries:{queue}:0"
    assert redis_client.hget(key, "1") == b"2"
    assert 0 < redis_client.pttl(key) <= 7 * 86_400_000

    no_commit = {"config": {"enable.auto.commit": False}, "assign": True}
    b = receiver(**no_commit)
    m1 = b.receive(WAIT)
    assert (m1.value, b.deliveries(m1)) == (b"m1", 3)  # the count carried over
    b.abandon(m1)  # the third failed delivery: dead-lettered
    assert b.receive(WAIT).value == b"m2"  # and B moves on
    letters, _ = router_records(s)
    assert len(letters) == 1
    dead = letters[0]
    assert (dead["reason_code"], dead["side"]) == ("max-deliveries", "RECEIVER")
    assert (dead["source_topic"], dead["source_partition"], dead["source_offset"]) == (queue, 0, 1)
    assert dead["value"] == b"m1"
    assert {"key": "app", "value": b"h1"} in dead["headers"]

    # B "dies" without committing (auto-commit off): C starts from offset 1 again.
    c = receiver(**no_commit)
    got = [c.receive(WAIT) for _ in range(3)]
    assert [m.value for m in got] == [b"m2", b"m3", b"m4"]
    with pytest.raises(ReceiveTimeout):
        c.receive(1.0)
    for m in got:
        c.done(m)
    b.close()  # commits 2 (m1 dead-lettered), then C commits 5
    c.close()
    assert committed(s, group, [(queue, 0)]) == {(queue, 0): 5}
    letters, _ = router_records(s)
    assert len(letters) == 1  # not dead-lettered twice

    # The next abandon on the partition removes the fields behind the committed offset.
    write(s, queue, [(b"m5", [])])
    with receiver(**no_commit) as d:
        m5 = d.receive(WAIT)
        assert m5.value == b"m5"
        d.abandon(m5)
    assert redis_client.hgetall(key) == {b"5": b"1"}


def test_a_grouped_message_at_the_limit_follows_its_groups_poison_policy(
    topology: TopologyFactory, redis_url: str, redis_prefix: str
) -> None:
    """max_deliveries=2. Group "stop" (guarantee-on-poison: stop-group): its member 1 at the
    limit is dead-lettered (`max-deliveries`) with a GroupStopped event, and after a
    receiver restart its members 2 and 3 are dead-lettered as `group-stopped`, never
    handed out. Group "skip" (no header: the receiver's default, dead-letter): its member
    1 at the limit is dead-lettered alone and member 2 is handed out. Ordinary messages
    between them are handed out in order."""
    s = topology()
    queue = s.topology.receive_queues[0]
    stop = [("guarantee-on-poison", b"stop-group")]
    sent: list[tuple[bytes, Headers]] = [
        *[(f"stop-{i}".encode(), member("stop", i, 3, stop)) for i in range(4)],
        (b"o1", []),
        *[(f"skip-{i}".encode(), member("skip", i, 2)) for i in range(3)],
        (b"o2", []),
    ]
    write(s, queue, sent)
    group = unique("app")

    def receiver() -> Receiver:
        conf = {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group}
        return Receiver(
            conf, s.topology.name, state=redis_url, state_prefix=redis_prefix, max_deliveries=2
        )

    handed: list[bytes | None] = []

    def take(r: Receiver, poison: set[bytes]) -> None:
        m = r.receive(WAIT)
        handed.append(m.value)
        if m.value in poison:
            r.abandon(m)
        else:
            r.done(m)

    with receiver() as r:
        for _ in range(3):  # stop-0; stop-1, abandoned twice: the limit
            take(r, {b"stop-1"})
    with receiver() as r:  # restarted: the stop is remembered
        for _ in range(6):  # o1, skip-0, skip-1 twice, skip-2, o2
            take(r, {b"skip-1"})
        with pytest.raises(ReceiveTimeout):
            r.receive(1.0)
    assert handed == [
        b"stop-0",
        b"stop-1",
        b"stop-1",
        b"o1",
        b"skip-0",
        b"skip-1",
        b"skip-1",
        b"skip-2",
        b"o2",
    ]
    letters, stopped = router_records(s)
    assert [(d["value"], d["reason_code"]) for d in letters] == [
        (b"stop-1", "max-deliveries"),
        (b"stop-2", "group-stopped"),
        (b"stop-3", "group-stopped"),
        (b"skip-1", "max-deliveries"),
    ]
    assert all({"key": "guarantee-id", "value": d["value"][:4]} in d["headers"] for d in letters)
    assert [(e["guarantee_id"], e["reason_code"], e["side"]) for e in stopped] == [
        ("stop", "max-deliveries", "RECEIVER")
    ]
    assert committed(s, group, [(queue, 0)]) == {(queue, 0): len(sent)}
