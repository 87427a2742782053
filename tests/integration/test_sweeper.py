"""The sweeper: abandoned groups leave the tables and become visible events; a release a
unit died before making is completed once the final is committed, and not before."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from ops.harness.pipeline import PipelineSpec
from router import schemas
from router.clients import redis_client
from router.contract import headers_for
from router.events import ABANDONED_GROUP
from router.routing import RouteRequest
from router.side import table_for
from router.sweeper import Sweeper
from tests.conftest import PipelineFactory, TopologyFactory
from tests.helpers import unique, wait_until


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
