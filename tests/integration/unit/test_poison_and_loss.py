"""A poison message inside a group (both policies), Redis losing its data, and SIGTERM.

* dead-letter: the bad message is dead-lettered, its group continues on its queue, in order;
* stop-group: the bad message and every later message of the group are parked on the
  dead-letter topic in order, a GroupStopped event is raised, other traffic flows;
* Redis restarted without its data: a sequenced group's continuation is parked as an
  orphan (never split onto another queue) and a TableReset event is raised;
* SIGTERM: a unit finishes its batch, commits, leaves its group at once and exits 0.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from router import contract
from router.backends.redis.client import redis_client
from router.config import RouterSettings
from router.contract import headers_for, schemas
from router.contract.events import DEAD_LETTER, GROUP_STOPPED, TABLE_RESET
from router.receiver import Receiver
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until

ONE_EACH = dict(
    send_units=1,
    receive_units=1,
    sweepers=0,
    send_queues=2,
    send_queue_partitions=1,
    transfer_partitions=3,
    receive_queues=3,
)


def records(bootstrap: str, topic: str, expected: int) -> list[Any]:
    """Until at least `expected` committed records are on `topic` (bounded); what came."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("r"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[Any] = []

    def enough() -> bool:
        got.extend(m for m in consumer.consume(100, 0.2) if m.error() is None)
        return len(got) >= expected

    try:
        wait_until(enough, 60, f"{expected} records on {topic}")
    finally:
        consumer.close()
    return got


def arrived(settings: RouterSettings, expected: int) -> list[tuple[str, bytes]]:
    """Until at least `expected` messages are on the receive queues (bounded); what came."""
    receiver = Receiver.from_settings(settings, group_id=unique("check"), assign=True)
    got: list[tuple[str, bytes]] = []

    def enough() -> bool:
        m = receiver.poll(0.2)
        if m is not None and m.value is not None:
            got.append((m.topic, m.value))
        return len(got) >= expected

    try:
        wait_until(enough, 60, f"{expected} messages on the receive queues")
    finally:
        receiver.close()
    return got


def held(p: Pipeline, *topics: str) -> list[tuple[str, Any]]:
    """Everything the receive queues (or `topics`) hold, read to their end offsets with
    read_committed once the units stopped (exit code 0: each committed its last batch):
    nothing more can arrive, so anything extra shows. (topic, message) per topic in
    offset order."""
    assert all(code == 0 for code in p.stop().values()), p.exit_codes
    names = list(topics or p.settings.topology.receive_queues)
    got = read_to_end(p.settings.kafka, {t: TopicPartition(t, 0) for t in names})
    return [(t, m) for t in names for m in got[t]]


def values(p: Pipeline) -> list[tuple[str, bytes]]:
    return [(t, m.value()) for t, m in held(p)]


def send_group_with_poison(s: RouterSettings, policy: str | None) -> Producer:
    """G: lines 0..3, line 1 poisoned (a TTL out of bounds); H: a clean group meanwhile."""
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    a, b = s.topology.send_queues
    for seq in range(4):
        headers = headers_for("G", seq=seq, final=seq == 3, on_poison=policy)
        if seq == 1:
            headers.append(("guarantee-ttl-ms", b"5"))
        producer.produce(a, f"G{seq}".encode(), b"G", partition=0, headers=headers)
        producer.produce(
            b,
            f"H{seq}".encode(),
            b"H",
            partition=0,
            headers=headers_for("H", seq=seq, final=seq == 3),
        )
    producer.flush(10)
    return producer


def test_poison_dead_lettered_and_the_group_continues(pipeline: PipelineFactory) -> None:
    p = pipeline(PipelineSpec(**ONE_EACH))  # type: ignore[arg-type]
    s = p.settings
    send_group_with_poison(s, policy="dead-letter")
    arrived(s, 7)
    records(s.kafka.bootstrap_servers, s.topology.dead_letter_topic, 1)
    got = values(p)
    g = [v for _, v in got if v.startswith(b"G")]
    assert g == [b"G0", b"G2", b"G3"]
    assert len({q for q, v in got if v.startswith(b"G")}) == 1
    assert [v for _, v in got if v.startswith(b"H")] == [b"H0", b"H1", b"H2", b"H3"]
    ((_, dead),) = held(p, s.topology.dead_letter_topic)
    record = schemas.decode(DEAD_LETTER, dead.value())
    assert record["value"] == b"G1" and record["reason_code"] == "bad-ttl"


def test_poison_stops_its_group_and_parks_the_rest_in_order(pipeline: PipelineFactory) -> None:
    p = pipeline(PipelineSpec(**ONE_EACH))  # type: ignore[arg-type]
    s = p.settings
    send_group_with_poison(s, policy="stop-group")
    arrived(s, 5)
    records(s.kafka.bootstrap_servers, s.topology.dead_letter_topic, 3)
    records(s.kafka.bootstrap_servers, s.topology.events_topic, 1)
    got = values(p)
    assert [v for _, v in got if v.startswith(b"G")] == [b"G0"]
    assert [v for _, v in got if v.startswith(b"H")] == [b"H0", b"H1", b"H2", b"H3"]
    parked = [
        schemas.decode(DEAD_LETTER, m.value()) for _, m in held(p, s.topology.dead_letter_topic)
    ]
    assert [r["value"] for r in parked] == [b"G1", b"G2", b"G3"]
    assert [r["reason_code"] for r in parked] == ["bad-ttl", "group-stopped", "group-stopped"]
    ((_, event),) = held(p, s.topology.events_topic)
    assert dict(event.headers())["schema"] == GROUP_STOPPED.encode()
    stopped = schemas.decode(GROUP_STOPPED, event.value())
    assert stopped["guarantee_id"] == "G" and stopped["reason_code"] == "bad-ttl"


def test_a_group_ended_on_the_send_side_is_released_on_the_receive_side(
    pipeline: PipelineFactory,
) -> None:
    """Defect 6, receive side: a group stopped by a poison message (S) and a group whose
    final is dead-lettered (D) never send their final downstream. The send unit follows
    each with a close marker on its transfer partition, and the receive unit releases it:
    every destination is free again and the receive table forgets both long before their
    TTL (10 minutes); the receive queues hold only what was forwarded."""
    p = pipeline(PipelineSpec(**ONE_EACH))  # type: ignore[arg-type]
    s = p.settings
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    a, b = s.topology.send_queues
    long_ttl = ("guarantee-ttl-ms", b"600000")
    for seq in range(3):
        stop = headers_for("S", seq=seq, final=seq == 2, on_poison="stop-group")
        # S1 has a TTL out of bounds: it stops S (S2, its final, is parked)
        stop.append(("guarantee-ttl-ms", b"5") if seq == 1 else long_ttl)
        producer.produce(a, f"S{seq}".encode(), partition=0, headers=stop)
        # D2, D's final, has a TTL out of bounds too: dead-lettered, and D ends there
        dead = headers_for("D", seq=seq, final=seq == 2)
        dead.append(("guarantee-ttl-ms", b"5") if seq == 2 else long_ttl)
        producer.produce(b, f"D{seq}".encode(), partition=0, headers=dead)
    assert producer.flush(30) == 0
    client = redis_client(s.redis)
    send, receive = (table_for(s, side, client) for side in ("send", "receive"))

    def released() -> bool:
        kept = send.entries()  # S stays, without a destination, to park its later messages
        return (
            not send.loads()
            and not receive.loads()
            and "D" not in kept
            and kept.get("S") is not None
            and kept["S"].dest == "!"
            and not {"S", "D"} & set(receive.entries())
        )

    arrived(s, 3)  # S0, D0, D1
    wait_until(released, 60, "S and D released on both sides, every destination free")
    assert sorted(v for _, v in values(p)) == [b"D0", b"D1", b"S0"]
    transfer = s.topology.transfer_topic
    parts = {
        f"{transfer}[{i}]": TopicPartition(transfer, i) for i in range(s.topology.receive_units)
    }
    markers = [
        dict(m.headers())[contract.GUARANTEE_ID]
        for ms in read_to_end(s.kafka, parts).values()
        for m in ms
        if dict(m.headers() or []).get(contract.CONTROL) == contract.CLOSE
    ]
    assert sorted(markers) == [b"D", b"S"]


def test_redis_losing_its_data_never_splits_a_sequenced_group(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path
) -> None:
    with Pipeline(
        private_settings,
        PipelineSpec(**ONE_EACH),
        tmp_path,  # type: ignore[arg-type]
        name=unique("loss"),
    ) as p:
        s = p.settings
        producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
        a = s.topology.send_queues[0]
        for seq in range(3):
            producer.produce(a, f"G{seq}".encode(), partition=0, headers=headers_for("G", seq=seq))
        producer.flush(10)
        before = arrived(s, 3)
        private_stack.redis_wipe()  # Redis back, empty: both tables are gone
        for seq in (3, 4):
            producer.produce(
                a,
                f"G{seq}".encode(),
                partition=0,
                headers=headers_for("G", seq=seq, final=seq == 4),
            )
        producer.produce(a, b"K0", partition=0, headers=headers_for("K", seq=0, final=True))
        producer.flush(10)
        records(s.kafka.bootstrap_servers, s.topology.dead_letter_topic, 2)
        records(s.kafka.bootstrap_servers, s.topology.events_topic, 1)
        arrived(s, 4)  # G0..G2 from before, and the new group K
        after = values(p)
        assert sorted(v for _, v in after) == [b"G0", b"G1", b"G2", b"K0"]
        assert [v for _, v in after if v.startswith(b"G")] == [b"G0", b"G1", b"G2"]
        assert len({q for q, v in before}) == 1
        parked = [
            schemas.decode(DEAD_LETTER, m.value()) for _, m in held(p, s.topology.dead_letter_topic)
        ]
        assert [r["value"] for r in parked] == [b"G3", b"G4"]
        assert {r["reason_code"] for r in parked} == {"group-entry-missing"}
        events = [m for _, m in held(p, s.topology.events_topic)]
        assert {dict(m.headers())["schema"] for m in events} == {TABLE_RESET.encode()}
        assert "SEND" in {schemas.decode(TABLE_RESET, m.value())["side"] for m in events}


def test_sigterm_commits_leaves_the_group_and_exits_zero(pipeline: PipelineFactory) -> None:
    p = pipeline(
        PipelineSpec(
            send_units=1, receive_units=1, sweepers=0, transfer_partitions=2, receive_queues=2
        )
    )
    s = p.settings
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    for i in range(200):
        producer.produce(s.topology.send_queues[i % 2], f"m{i}".encode(), partition=i % 3)
    producer.flush(10)
    first = arrived(s, 200)
    (unit,) = p.fleet.running("send-unit")
    t0 = time.monotonic()
    assert unit.stop(timeout=30) == 0
    # It left the group at once (not after the session timeout).
    wait_until(lambda: p.membership(s.topology.send_group)[0] == 0, 5, "the group to be empty")
    assert time.monotonic() - t0 < 8
    # A new unit starts from what the old one committed: nothing again, nothing missing.
    p.fleet.start("send-unit")
    for i in range(200, 220):
        producer.produce(s.topology.send_queues[0], f"m{i}".encode(), partition=0)
    producer.flush(10)
    arrived(s, 220)
    everything = [v for _, v in values(p)]  # all of it: a copy too many would show
    assert sorted(everything) == sorted(f"m{i}".encode() for i in range(220))
    assert len(first) == 200
