"""The sweeper's horizon (router/sweeper/horizon.py) against the real broker and Redis: an entry
past its TTL is swept only once every record written before its deadline was routed by
its side, and never while the broker does not answer."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from router.backends.redis.client import redis_client
from router.config import KafkaSettings
from router.sweeper.horizon import HorizonReader
from router.sweeper.loop import Sweeper
from router.table.model import TableModel
from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable
from router.topology.side import table_for
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.helpers import unique, wait_until

TTL = 10_000


def _route(table: ManagementTable, gid: str, lane: str, now_ms: int) -> None:
    table.route([RouteRequest(gid, False, TTL, f"{lane}/0", lane)], now_ms=now_ms)


def test_sweep_takes_the_horizon_like_the_model(topology: TopologyFactory) -> None:
    """sweep.lua and the reference model: only deadlines before now and the horizon go;
    the others stay and go in a later sweep."""
    s = topology()
    table = table_for(s, "send", redis_client(s.redis))
    model = TableModel(list(table.destinations))
    for i, gid in enumerate(["a", "b", "c"]):
        r = [RouteRequest(gid, False, 100, f"q/0/{i}", "q/0")]
        table.route(r, now_ms=i * 100)
        model.route(r, i * 100)
    # deadlines: a 100, b 202, c 304 (update times rounded up to a step of TTL / 16: 6 ms)
    for horizon, expected in ((150, ["a"]), (150, []), (305, ["b", "c"])):
        got = [x.guarantee_id for x in table.sweep(10, now_ms=1_000, horizon_ms=horizon)]
        assert got == [x.guarantee_id for x in model.sweep(1_000, 10, horizon)] == expected
    assert table.entries() == {} and model.entries == {}


def test_a_receive_entry_is_kept_while_the_send_queues_hold_older_records(
    topology: TopologyFactory,
) -> None:
    """The transfer topic is drained (no unit runs), but the send queue holds a record
    written before the entries' deadline: neither side's entry is swept, the receive
    side's included. Once the send units' group has committed past it, both are."""
    s = topology()
    client = redis_client(s.redis)
    tables = {side: table_for(s, side, client) for side in ("send", "receive")}
    queue = s.topology.send_queues[0]
    now = tables["send"].now_ms()
    for t in tables.values():
        _route(t, "g", f"{queue}/0", now - 2 * TTL)  # deadline: now - TTL
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    producer.produce(queue, b"g 1", partition=0, timestamp=now - 3 * TTL // 2)
    assert producer.flush(30) == 0

    sweeper = Sweeper(s, horizons=HorizonReader(s, unique("sweeper"), delivery_slack_ms=1_000))
    assert sweeper.run_once().swept == 0
    assert all("g" in t.entries() for t in tables.values())
    assert sweeper.metrics.counters["sweep_deferred"] == 1

    committer = Consumer(
        {
            "bootstrap.servers": s.kafka.bootstrap_servers,
            "group.id": s.topology.send_group,
            "enable.auto.commit": False,
        }
    )
    committer.commit(offsets=[TopicPartition(queue, 0, 1)], asynchronous=False)
    committer.close()
    assert sweeper.run_once().swept == 2
    assert all(t.entries() == {} for t in tables.values())


def test_nothing_is_swept_while_the_broker_does_not_answer_nor_right_after(
    topology: TopologyFactory,
) -> None:
    s = topology()
    client = redis_client(s.redis)
    tables = {side: table_for(s, side, client) for side in ("send", "receive")}
    now = tables["send"].now_ms()
    for t in tables.values():
        _route(t, "g", f"{s.topology.send_queues[0]}/0", now - 2 * TTL)
    away = s.model_copy(update={"kafka": KafkaSettings(bootstrap_servers="127.0.0.1:1")})
    sweeper = Sweeper(away, horizons=HorizonReader(away, unique("sweeper"), timeout=2))
    assert sweeper.run_once().swept == 0
    assert sweeper.metrics.counters["horizon_unknown"] == 1
    assert all("g" in t.entries() for t in tables.values())

    # The broker answers again: senders get a grace to deliver what they held back.
    reader = HorizonReader(s, unique("sweeper"), recovery_grace_ms=2_000, delivery_slack_ms=0)
    reader.after_outage()
    sweeper = Sweeper(s, horizons=reader)
    assert sweeper.run_once().swept == 0
    assert sweeper.metrics.counters["horizon_unknown"] == 1
    total = 0

    def both_swept() -> bool:
        nonlocal total
        total += sweeper.run_once().swept
        return total == 2

    wait_until(both_swept, 30, "both entries swept once the grace is over")
    assert all(t.entries() == {} for t in tables.values())
