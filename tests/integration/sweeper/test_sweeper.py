"""The sweeper: abandoned groups leave the tables and become visible events; a release a
unit died before making is completed once the final is committed, and not before."""

from __future__ import annotations

import json
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ops.harness.stack.pipeline import PipelineSpec
from router.backends.redis.client import redis_client
from router.contract import headers_for, schemas
from router.contract.events import ABANDONED_GROUP
from router.sweeper.horizon import HorizonReader
from router.sweeper.loop import Sweeper
from router.table.routing import RouteRequest
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory, TopologyFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.inprocess import FencedProducer


def test_abandoned_group_is_swept_from_both_tables_with_an_event(pipeline: PipelineFactory) -> None:
    p = pipeline(
        PipelineSpec(send_units=1, receive_units=1, transfer_partitions=2, receive_queues=2)
    )
    s = p.settings
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    # A sender that dies after the first line of its order: TTL 1 s.
    producer.produce(
        s.topology.send_queues[0],
        b"line 0",
        partition=0,
        headers=headers_for("orphan", seq=0, ttl_ms=1000),
    )
    producer.flush(10)

    consumer = Consumer(
        {
            "bootstrap.servers": s.kafka.bootstrap_servers,
            "group.id": unique("events"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(s.topology.events_topic, 0, 0)])
    events: list[dict[str, object]] = []

    def two_events() -> bool:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            assert dict(m.headers())["schema"] == ABANDONED_GROUP.encode()
            events.append(schemas.decode(ABANDONED_GROUP, m.value()))
        return len(events) >= 2

    wait_until(two_events, 60, "abandoned-group events from both tables")
    consumer.close()
    assert {e["side"] for e in events} == {"SEND", "RECEIVE"}
    for e in events:
        assert e["guarantee_id"] == "orphan"
        assert e["ttl_ms"] == 1000 and e["final_routed"] is False
    client = redis_client(s.redis)
    for side in ("send", "receive"):
        t = table_for(s, side, client)
        assert t.entries() == {} and t.loads() == {}
        assert t.outbox(10) == []  # published, then dropped from the outbox


def test_interrupted_release_is_completed_only_once_the_final_is_committed(
    topology: TopologyFactory,
) -> None:
    s = topology(sweeper={"closing_grace_ms": 0})
    source = s.topology.send_queues[0]
    table = table_for(s, "send", redis_client(s.redis))
    # A unit routed two groups' finals (offsets 4 and 9 of a send-queue partition),
    # committed its transaction up to offset 5 only, and died before releasing either.
    table.route(
        [
            RouteRequest("done", True, 60_000, f"{source}/0/4", f"{source}/0"),
            RouteRequest("pending", True, 60_000, f"{source}/0/9", f"{source}/0"),
        ]
    )
    committer = Consumer(
        {
            "bootstrap.servers": s.kafka.bootstrap_servers,
            "group.id": s.topology.send_group,
            "enable.auto.commit": False,
        }
    )
    committer.commit(offsets=[TopicPartition(source, 0, 5)], asynchronous=False)
    committer.close()

    report = Sweeper(s).run_once()
    assert report.resolved == 1
    assert set(table.entries()) == {"pending"}  # its final (offset 9) is not committed yet
    assert table.loads() == {table.entries()["pending"].dest: 1}


def _records(bootstrap: str, topic: str) -> list[tuple[int, bytes, dict[str, bytes]]]:
    """(partition, value, headers) of every committed record of `topic`, read to its end
    offsets (not for a fixed while)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("read"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[tuple[int, bytes, dict[str, bytes]]] = []
    ended: set[int] = set()
    try:
        while len(ended) < len(parts):
            m = c.poll(10)
            assert m is not None, f"{topic} not read to its end"
            if m.error() is not None:
                ended.add(m.partition())
            else:
                out.append((m.partition(), m.value(), dict(m.headers() or [])))
    finally:
        c.close()
    return out


def test_an_outage_longer_than_the_ttl_does_not_end_a_group(pipeline: PipelineFactory) -> None:
    """Every unit stops (the router is down) for longer than the TTL while a group's later
    messages wait in its send queue: the sweeper, running all along, keeps the group's
    entries, and once units run again the group completes unsplit on its destination. A
    group whose sender really went quiet is swept, but only once its lane was read."""
    ttl = 10_000  # longer than stopping the units takes: the sender does not pause a TTL
    p = pipeline(
        PipelineSpec(
            send_units=1,
            receive_units=1,
            sweepers=0,
            send_queues=1,
            send_queue_partitions=1,
            transfer_partitions=2,
            receive_queues=2,
        )
    )
    s = p.settings
    bootstrap = s.kafka.bootstrap_servers
    queue = s.topology.send_queues[0]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def send(gid: str, seq: int, final: bool = False) -> None:
        headers = headers_for(gid, seq=seq, final=final, ttl_ms=ttl)
        producer.produce(queue, f"{gid} {seq}".encode(), partition=0, headers=headers)
        assert producer.flush(30) == 0

    client = redis_client(s.redis)
    tables = {side: table_for(s, side, client) for side in ("send", "receive")}
    send("outage", 0)
    send("quiet", 0)  # its sender goes quiet for good
    wait_until(
        lambda: all({"outage", "quiet"} <= set(t.entries()) for t in tables.values()),
        60,
        "both groups routed by both sides",
    )
    # The router goes down: every unit stops (gracefully: what it routed is committed).
    for proc in p.fleet.running():
        proc.terminate()
    for proc in list(p.fleet.procs):
        assert proc.stop() == 0, proc.tail()
    # The outage group's sender goes on; its messages wait in the send queue.
    for seq in (1, 2):
        send("outage", seq)
    send("outage", 3, final=True)
    first_deadline = min(e.deadline_ms for t in tables.values() for e in t.entries().values())
    assert tables["send"].now_ms() < first_deadline, "the sender paused for a whole TTL"

    sweeper = Sweeper(s, horizons=HorizonReader(s, unique("sweeper"), delivery_slack_ms=1_000))
    last_deadline = max(e.deadline_ms for t in tables.values() for e in t.entries().values())

    def rounds_well_past_the_ttl() -> bool:
        assert sweeper.run_once().swept == 0
        # A sweeper that counts the outage would have swept every entry by now.
        return tables["send"].now_ms() > last_deadline + 3_000

    wait_until(rounds_well_past_the_ttl, 60, "sweep rounds past every entry's TTL", 0.5)
    for t in tables.values():
        # "quiet" too: while the lane is unread nothing tells its sender from the other.
        assert {"outage", "quiet"} <= set(t.entries())
    assert sweeper.metrics.counters["sweep_deferred"] > 0

    # The router comes back: "outage" completes (its entries released after its final),
    # "quiet" is swept now that everything written before its deadline was routed.
    p.fleet.start("send-unit")
    p.fleet.start("receive-unit")
    p.wait_ready()

    def settled() -> bool:
        sweeper.run_once()
        return all(t.entries() == {} for t in tables.values())

    wait_until(settled, 90, "outage released and quiet swept on both sides", 0.5)

    received = [
        (q, value)
        for q in s.topology.receive_queues
        for _, value, _headers in _records(bootstrap, q)
    ]
    outage = [(q, v) for q, v in received if v.startswith(b"outage ")]
    assert [v for _, v in outage] == [b"outage 0", b"outage 1", b"outage 2", b"outage 3"]
    assert len({q for q, _ in outage}) == 1, f"split: {outage}"
    assert [v for _, v in received if v.startswith(b"quiet ")] == [b"quiet 0"]
    assert _records(bootstrap, s.topology.dead_letter_topic) == []  # nothing parked
    abandoned = [
        schemas.decode(ABANDONED_GROUP, value)
        for _, value, headers in _records(bootstrap, s.topology.events_topic)
        if headers.get(schemas.SCHEMA_HEADER) == ABANDONED_GROUP.encode()
    ]
    assert sorted((e["guarantee_id"], e["side"]) for e in abandoned) == [
        ("quiet", "RECEIVE"),
        ("quiet", "SEND"),
    ]


def test_an_events_producer_that_failed_fatally_is_replaced(topology: TopologyFactory) -> None:
    """The sweeper's events producer fails fatally: the round fails, and the next rounds
    publish through a new producer; the outbox keeps its item until Kafka acknowledged the
    event, and the dead producer is let go (nothing the failed round logged or raised
    holds it). Before, every round failed on the same dead producer and the AbandonedGroup
    event was never published."""
    s = topology(sweeper={"interval_ms": 100})
    client = redis_client(s.redis)
    table = table_for(s, "send", client)
    # An entry the sweeper removed a moment ago: its item waits in the outbox.
    item = {"e": "0|1000|2000|1000||x/0", "t": 3000, "g": "gone"}
    client.rpush(table.keys.outbox, json.dumps(item))

    sweeper = Sweeper(s)
    dead = FencedProducer(s.kafka.bootstrap_servers, s.topology.events_topic, knows=True)
    destroyed = dead.destroyed
    sweeper._events.producer = dead
    del dead
    runner = threading.Thread(target=sweeper.run, name="sweeper", daemon=True)
    runner.start()
    try:
        wait_until(lambda: table.outbox(10) == [], 60, "the outbox published")
        assert destroyed.wait(30), "the dead producer is still held"
    finally:
        sweeper.request_stop()
        runner.join(30)
    assert not runner.is_alive()
    assert sweeper.metrics.counters["producer_restarts"] == 1
    assert sweeper.metrics.counters["kafka_errors"] >= 1  # the round on the dead producer
    published = [
        schemas.decode(ABANDONED_GROUP, value)
        for _, value, _ in _records(s.kafka.bootstrap_servers, s.topology.events_topic)
    ]
    assert [e["guarantee_id"] for e in published] == ["gone"]


def test_a_sweeper_whose_producer_fails_at_its_last_flush_still_stops_cleanly(
    topology: TopologyFactory,
) -> None:
    """A round with nothing to publish never calls the producer, so its fatal error may
    first come in the flush at shutdown: logged, and the sweeper still closes its clients
    and returns 0. Before, `run` raised the KafkaException and skipped the closes."""
    s = topology()
    sweeper = Sweeper(s)
    fenced = FencedProducer(s.kafka.bootstrap_servers, s.topology.events_topic, knows=False)
    fenced.produce(s.topology.events_topic, b"queued")  # the flush meets the fence
    sweeper._events.producer = fenced
    del fenced
    sweeper.request_stop()
    assert sweeper.run() == 0
    assert sweeper.metrics.counters["kafka_errors"] == 1
    assert sweeper.metrics.counters["producer_restarts"] == 0  # none made to be thrown away


def test_an_outbox_item_that_cannot_become_an_event_is_logged_and_dropped(
    topology: TopologyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """One malformed item (a foreign write, say) among good ones: the good ones are
    published, the bad one is dropped with its text in an error; the round goes on to the
    other outbox and table. Before, its ValueError ended the sweeper, at every start."""
    s = topology()
    client = redis_client(s.redis)
    send, receive = table_for(s, "send", client), table_for(s, "receive", client)

    def item(gid: str) -> str:
        return json.dumps({"e": "0|1000|2000|1000||x/0", "t": 3000, "g": gid})

    client.rpush(send.keys.outbox, item("first"), "garbage", item("second"))
    client.rpush(send.keys.waits_out, "not|a number|!w|g")
    client.rpush(receive.keys.outbox, item("third"))
    report = Sweeper(s).run_once()
    assert report.published == 4  # read and done with: three events and the bad item
    for t in (send, receive):
        assert t.items(t.keys.outbox, 10) == [] and t.items(t.keys.waits_out, 10) == []
    published = [
        schemas.decode(ABANDONED_GROUP, value)["guarantee_id"]
        for _, value, _ in _records(s.kafka.bootstrap_servers, s.topology.events_topic)
    ]
    assert sorted(published) == ["first", "second", "third"]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("malformed item dropped" in e and "garbage" in e for e in errors), errors
    assert any("malformed item dropped" in e and "not|a number" in e for e in errors), errors
