"""Per-message lifetime, through real unit processes, from a plain confluent-kafka
producer using only the documented headers (docs/explanation/lifetime.md, "Lifetime and expiry"):

* a message whose lifetime ended is never forwarded, at the send unit or at the receive
  unit, and each one has exactly one ExpiredMessage event naming the hop;
* an expired member with `message-on-expiry: skip` leaves the rest of its group delivered,
  in order, on one queue; with `expire-group` the group stops there (GroupStopped, later
  members dead-lettered as group-stopped, nothing after it delivered);
* every message is accounted for: delivered + expired + dead-lettered = sent.

Judged from what the receive queues, the events topic and the dead-letter topic hold
(read with read_committed to their end after the units stopped), never from counters.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer, TopicPartition

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from router import contract
from router.contract import events, lifetime, schemas
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import wait_until

SPEC = PipelineSpec(
    send_units=1, receive_units=1, sweepers=0, transfer_partitions=2, receive_queues=2
)
Headers = list[tuple[str, bytes]]


def produce(p: Pipeline, messages: list[tuple[str, Headers]]) -> None:
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers, "acks": "all"})
    queue = p.settings.topology.send_queues[0]
    for value, headers in messages:
        producer.produce(queue, value.encode(), partition=0, headers=headers)
    assert producer.flush(30) == 0


def everything(p: Pipeline) -> dict[str, list[Any]]:
    """Every committed record of the receive queues, events and dead letters."""
    t = p.settings.topology
    parts = {q: TopicPartition(q, 0) for q in t.receive_queues}
    parts["events"] = TopicPartition(t.events_topic, 0)
    parts["dlq"] = TopicPartition(t.dead_letter_topic, 0)
    return read_to_end(p.settings.kafka, parts)


def expired_events(read: dict[str, list[Any]]) -> list[dict[str, Any]]:
    out = []
    for m in read["events"]:
        if dict(m.headers() or []).get(schemas.SCHEMA_HEADER) == events.EXPIRED_MESSAGE.encode():
            out.append(schemas.decode(events.EXPIRED_MESSAGE, m.value()))
    return out


def grouped(gid: str, seq: int, *, final: bool = False, extra: Headers | None = None) -> Headers:
    own = [(k, v) for k, v in contract.headers_for(gid, final=final, seq=seq) if v is not None]
    return [*own, *(extra or [])]


def test_expired_messages_are_never_forwarded_and_each_has_one_event(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(SPEC)
    past = [(lifetime.EXPIRES_AT, str(int(time.time() * 1000) - 1).encode())]
    live = [(lifetime.LIFETIME_MS, b"600000")]
    skip = [(lifetime.ON_EXPIRY, b"skip")]
    stop = [(lifetime.ON_EXPIRY, b"expire-group")]
    sent = [
        ("o-live", live),
        ("o-dead", past),
        ("s0", grouped("skipper", 0, extra=live)),
        ("s1", grouped("skipper", 1, extra=[*past, *skip])),
        ("s2", grouped("skipper", 2)),
        ("s3", grouped("skipper", 3, final=True)),
        ("x0", grouped("stopper", 0)),
        ("x1", grouped("stopper", 1, extra=[*past, *stop])),
        ("x2", grouped("stopper", 2)),
        ("x3", grouped("stopper", 3, final=True)),
        ("o-plain", []),
        ("f0", grouped("first", 0, extra=[*past, *skip])),  # its group still opens downstream
        ("f1", grouped("first", 1)),
        ("f2", grouped("first", 2, final=True)),
        ("b0", grouped("badfirst", 0, extra=[(lifetime.LIFETIME_MS, b"soon")])),
        ("b1", grouped("badfirst", 1, final=True)),
    ]
    produce(p, sent)
    queues = p.settings.topology.receive_queues
    wait_until(
        lambda: (
            sum(p.unit_metrics().get("receive-unit", {}).get(k, 0) for k in ("messages_out",)) >= 9
        ),
        60,
        "the live messages to be delivered",
    )
    p.stop()
    assert all(code == 0 for code in p.exit_codes.values()), p.exit_codes
    read = everything(p)
    delivered = {q: [m.value().decode() for m in read[q]] for q in queues}
    values = [v for q in queues for v in delivered[q]]
    expected = ["o-live", "s0", "s2", "s3", "x0", "o-plain", "f1", "f2", "b1"]
    assert sorted(values) == sorted(expected), delivered
    for group, members in (("s", ["s0", "s2", "s3"]), ("f", ["f1", "f2"]), ("b", ["b1"])):
        queue = next(delivered[q] for q in queues if members[0] in delivered[q])
        assert [v for v in queue if v.startswith(group)] == members  # in order, one queue
    gone = expired_events(read)
    assert {(e["guarantee_id"], e["seq"], e["on_expiry"], e["hop"]) for e in gone} == {
        (None, None, None, "SEND_UNIT"),
        ("skipper", 1, "SKIP", "SEND_UNIT"),
        ("stopper", 1, "EXPIRE_GROUP", "SEND_UNIT"),
        ("first", 0, "SKIP", "SEND_UNIT"),
    }
    assert len(gone) == 4
    send_queue = p.settings.topology.send_queues[0]
    assert all(e["source_topic"] == send_queue for e in gone)
    assert sorted(e["source_offset"] for e in gone) == [1, 3, 7, 11]  # o-dead, s1, x1, f0
    dead = [schemas.decode(events.DEAD_LETTER, m.value()) for m in read["dlq"]]
    assert sorted((d["value"], d["reason_code"]) for d in dead) == [
        (b"b0", "bad-lifetime"),
        (b"x2", "group-stopped"),
        (b"x3", "group-stopped"),
    ]
    stopped = [
        m
        for m in read["events"]
        if dict(m.headers() or []).get(schemas.SCHEMA_HEADER) == events.GROUP_STOPPED.encode()
    ]
    assert len(stopped) == 1
    assert schemas.decode(events.GROUP_STOPPED, stopped[0].value())["reason_code"] == "expired"
    assert len(values) + len(gone) + len(dead) == len(sent)  # every message accounted for


def test_a_lifetime_that_ends_on_the_transfer_topic_expires_at_the_receive_unit(
    pipeline: PipelineFactory,
) -> None:
    """Forwarded alive by the send unit (stamped with its instant), found expired by the
    receive unit that starts only after the instant."""
    p = pipeline(SPEC, start=False)
    p.prepare()
    p.fleet.start("send-unit", 1)
    lifetime_ms = 4_000
    started = time.time()
    produce(
        p,
        [
            ("r-short", [(lifetime.LIFETIME_MS, str(lifetime_ms).encode())]),
            (
                "r-g0",
                grouped("later", 0, extra=[(lifetime.LIFETIME_MS, str(lifetime_ms).encode())]),
            ),
            ("r-g1", grouped("later", 1, final=True)),
            ("r-long", [(lifetime.LIFETIME_MS, b"600000")]),
        ],
    )
    transfer = p.settings.topology.transfer_topic
    parts = {f"t{i}": TopicPartition(transfer, i) for i in range(SPEC.transfer_partitions)}

    def forwarded() -> int:
        got = read_to_end(p.settings.kafka, parts, timeout=30)
        return sum(
            1
            for ms in got.values()
            for m in ms
            if not any(k == contract.CONTROL for k, _ in m.headers() or [])
        )

    wait_until(lambda: forwarded() >= 4, 60, "the send unit to forward all four alive")
    stamps = [
        dict(m.headers() or []).get(lifetime.ROUTER_EXPIRES_AT)
        for ms in read_to_end(p.settings.kafka, parts).values()
        for m in ms
    ]
    assert sum(1 for s in stamps if s is not None) >= 3  # the three with a lifetime
    wait_until(lambda: time.time() > started + lifetime_ms / 1000 + 0.5, 30, "the lifetime to end")
    p.fleet.start("receive-unit", 1)
    queues = p.settings.topology.receive_queues
    wait_until(
        lambda: p.unit_metrics().get("receive-unit", {}).get("messages_in", 0) >= 4,
        60,
        "the receive unit to take all four",
    )
    p.stop()
    read = everything(p)
    values = sorted(m.value().decode() for q in queues for m in read[q])
    assert values == ["r-g1", "r-long"], values  # the group goes on without its member 0
    gone = expired_events(read)
    assert {(e["guarantee_id"], e["hop"]) for e in gone} == {
        (None, "RECEIVE_UNIT"),
        ("later", "RECEIVE_UNIT"),
    }
    assert len(gone) == 2
    assert all(e["source_topic"] == transfer for e in gone)
    assert read["dlq"] == []
