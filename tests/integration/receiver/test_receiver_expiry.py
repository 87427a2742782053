"""A lifetime that ends on the receive queue, after the units forwarded the message alive:
the receiver library (`Receiver`) finds it expired and never hands it to the application
(docs/explanation/receiver.md, "Lifetime at the receiver"), through real unit processes, from a
plain confluent-kafka producer using only the documented headers and from `Sender`:

* each expired message has one ExpiredMessage event, hop RECEIVER, naming its receive-
  queue position and keeping its original headers;
* `skip`: the group goes on without the member, its gap in the group's status and in the
  `ReceivedGroup`; `expire-group`: a GroupStopped event (reason `expired`) and the later
  members dead-lettered as `group-stopped`; an expired final ends its group;
* handed out + expired + dead-lettered = sent, nothing both handed out and expired, and a
  receiver restarted in the same consumer group hands out and reports nothing again.

Judged from what the application was handed and what the events and dead-letter topics
hold (read_committed, to their end), never from counters.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from router import contract
from router.config import RouterSettings
from router.contract import events, lifetime, schemas
from router.receiver import Received, Receiver, ReceiveTimeout
from router.sender import Sender
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until

SPEC = PipelineSpec(
    send_units=1, receive_units=1, sweepers=0, transfer_partitions=2, receive_queues=2
)
LIFETIME_MS = 14_000  # long enough for both units to forward it alive on a loaded machine
Headers = list[tuple[str, bytes]]


def grouped(gid: str, seq: int, *, final: bool = False, extra: Headers | None = None) -> Headers:
    own = [(k, v) for k, v in contract.headers_for(gid, final=final, seq=seq) if v is not None]
    return [*own, *(extra or [])]


def on_queues(p: Pipeline) -> list[Any]:
    t = p.settings.topology
    read = read_to_end(p.settings.kafka, {q: TopicPartition(q, 0) for q in t.receive_queues})
    return [m for q in t.receive_queues for m in read[q]]


def router_topics(s: RouterSettings) -> tuple[list[dict[str, Any]], list[Any], list[Any]]:
    """(ExpiredMessage events, GroupStopped events, dead letters), decoded."""
    t = s.topology
    read = read_to_end(
        s.kafka,
        {
            "events": TopicPartition(t.events_topic, 0),
            "dlq": TopicPartition(t.dead_letter_topic, 0),
        },
    )

    def of(kind: str) -> list[dict[str, Any]]:
        return [
            schemas.decode(kind, m.value())
            for m in read["events"]
            if dict(m.headers() or []).get(schemas.SCHEMA_HEADER) == kind.encode()
        ]

    dead = [schemas.decode(events.DEAD_LETTER, m.value()) for m in read["dlq"]]
    return of(events.EXPIRED_MESSAGE), of(events.GROUP_STOPPED), dead


def forwarded_alive(p: Pipeline, count: int, sent_at: float) -> None:
    """Every message reached a receive queue before its lifetime ended (else the test
    would be about another hop), then the lifetime ends."""
    wait_until(
        lambda: len(on_queues(p)) >= count,
        LIFETIME_MS / 1000 * 0.8,
        f"the units to forward all {count} messages well within their lifetime",
    )
    expired, _, _ = router_topics(p.settings)
    assert expired == [], "expired at a unit: the machine is too slow for this lifetime"
    wait_until(lambda: time.time() > sent_at + LIFETIME_MS / 1000 + 0.5, 30, "the lifetime to end")


def drain(receiver: Receiver) -> list[Received]:
    """Everything the receiver hands out until nothing comes for a while, each done."""
    got: list[Received] = []
    while True:
        try:
            m = receiver.receive(8.0)
        except ReceiveTimeout:
            return got
        got.append(m)
        receiver.done(m)


def test_a_lifetime_ending_on_the_receive_queue_expires_at_the_receiver(
    pipeline: PipelineFactory, redis_url: str, redis_prefix: str
) -> None:
    p = pipeline(SPEC)
    s = p.settings
    life = [(lifetime.LIFETIME_MS, str(LIFETIME_MS).encode())]
    sent = [
        ("alive", [(lifetime.LIFETIME_MS, b"600000")]),
        ("short", [*life, ("app", b"kept")]),
        ("s0", grouped("skipper", 0)),
        ("s1", grouped("skipper", 1, extra=[*life, (lifetime.ON_EXPIRY, b"skip")])),
        ("s2", grouped("skipper", 2)),
        ("s3", grouped("skipper", 3, final=True)),
        ("x0", grouped("stopper", 0)),
        ("x1", grouped("stopper", 1, extra=[*life, (lifetime.ON_EXPIRY, b"expire-group")])),
        ("x2", grouped("stopper", 2)),
        ("x3", grouped("stopper", 3, final=True)),
        ("e0", grouped("ender", 0)),
        ("e1", grouped("ender", 1, final=True, extra=life)),
    ]
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers, "acks": "all"})
    sent_at = time.time()
    for value, headers in sent:
        producer.produce(s.topology.send_queues[0], value.encode(), partition=0, headers=headers)
    assert producer.flush(30) == 0
    forwarded_alive(p, len(sent), sent_at)

    group = unique("app")
    conf = {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group}
    with Receiver(conf, s.topology.name, state=redis_url, state_prefix=redis_prefix) as receiver:
        handed = drain(receiver)
        statuses = {g: receiver.group_status(g) for g in ("skipper", "stopper", "ender")}
    values = [str(m.value.decode()) for m in handed if m.value is not None]
    assert sorted(values) == sorted(["alive", "s0", "s2", "s3", "x0", "e0"]), values
    for prefix, members in (("s", ["s0", "s2", "s3"]), ("x", ["x0"]), ("e", ["e0"])):
        assert [v for v in values if v[0] == prefix] == members  # in order

    gone, stopped, dead = router_topics(s)
    assert {(e["guarantee_id"], e["seq"], e["on_expiry"], e["final"]) for e in gone} == {
        (None, None, None, False),
        ("ender", 1, "SKIP", True),
        ("skipper", 1, "SKIP", False),
        ("stopper", 1, "EXPIRE_GROUP", False),
    }
    assert len(gone) == 4
    queues = set(s.topology.receive_queues)
    assert all(e["hop"] == "RECEIVER" and e["source_topic"] in queues for e in gone), gone
    short = next(e for e in gone if e["guarantee_id"] is None)
    assert {"key": "app", "value": b"kept"} in short["headers"]  # the original headers
    assert [(g["guarantee_id"], g["reason_code"], g["side"]) for g in stopped] == [
        ("stopper", "expired", "RECEIVER")
    ]
    assert sorted((d["value"], d["reason_code"]) for d in dead) == [
        (b"x2", "group-stopped"),
        (b"x3", "group-stopped"),
    ]
    assert len(handed) + len(gone) + len(dead) == len(sent)  # every message accounted for
    positions = {(m.topic, m.offset) for m in handed}
    assert not positions & {(e["source_topic"], e["source_offset"]) for e in gone}

    skipper, stopper, ender = (statuses[g] for g in ("skipper", "stopper", "ender"))
    assert skipper is not None and (skipper.complete, skipper.last_seq) == (True, 3)
    assert skipper.expired_seqs == (1,) and skipper.done_count == 3
    assert stopper is not None and stopper.stopped and stopper.expired_seqs == (1,)
    assert ender is not None and ender.complete and ender.expired_seqs == (1,)

    with Receiver(conf, s.topology.name, state=redis_url, state_prefix=redis_prefix) as again:
        assert drain(again) == []  # committed past everything: nothing comes again
    assert len(router_topics(s)[0]) == len(gone)  # and nothing is reported twice


def test_sender_and_receive_group_see_the_gap_of_a_member_expired_at_the_receiver(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(SPEC)
    s = p.settings
    kafka = {"bootstrap.servers": s.kafka.bootstrap_servers}
    life = [(lifetime.LIFETIME_MS, str(LIFETIME_MS))]
    sent_at = time.time()
    with Sender(kafka, s.topology.name) as sender:
        sender.send(b"lib-0", guarantee_id="lib")
        sender.send(b"lib-1", guarantee_id="lib", headers=life)
        sender.send(b"lib-2", guarantee_id="lib", final=True)
        sender.send(b"plain-short", headers=life)
        sender.send(b"plain-long")
    forwarded_alive(p, 5, sent_at)

    receiver = Receiver.from_settings(s, group_id=unique("app"), keep_status=True)
    try:
        got = [receiver.receive_group(20.0) for _ in range(2)]
        receiver.done(got[0])
        receiver.done(got[1])
        with_gap = next(g for g in got if g.guarantee_id == "lib")
        assert with_gap.values == [b"lib-0", b"lib-2"]
        assert not with_gap.complete and with_gap.expired_seqs == (1,)
        assert [g.values for g in got if g.guarantee_id is None] == [[b"plain-long"]]
        status = receiver.group_status("lib")
        assert status is not None and status.complete and status.expired_seqs == (1,)
        with pytest.raises(ReceiveTimeout):
            receiver.receive_group(8.0)  # plain-short is read, and not handed out
    finally:
        receiver.close()
    gone, _, dead = router_topics(s)
    assert {(e["guarantee_id"], e["seq"], e["hop"]) for e in gone} == {
        (None, None, "RECEIVER"),
        ("lib", 1, "RECEIVER"),
    }
    assert len(gone) == 2
    assert dead == []
