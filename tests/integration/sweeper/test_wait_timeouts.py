"""Wait time-outs in the waiting room, through the real sweeper, table and events topic.

Under the default `routing.wait_timeout_policy` ("report") a group, or a lane's ordinary
messages, that waited past `routing.max_wait_ms` is reported once (a GroupWaitTimedOut
event with outcome WAITING, the `wait_timeouts` count) and keeps its place: nothing is
shared, so nothing is interleaved. The explicit "share" admits it to a busy destination.
"""

from __future__ import annotations

import threading

import redis

from router.contract import events
from router.sweeper.loop import Sweeper
from router.table import room
from router.table.routing import RouteRequest
from router.topology.side import table_for
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.helpers import read_records, wait_until
from tests.fixtures.inprocess import FencedProducer


def test_a_wait_past_max_wait_is_reported_once_and_keeps_its_place(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    s = topology(topology={"receive_units": 1}, routing={"max_wait_ms": 1_000})
    assert (s.routing.busy_policy, s.routing.wait_timeout_policy) == ("wait", "report")
    lane = f"{s.topology.send_queues[0]}/0"
    table = table_for(s, "send", redis_client)
    (dest,) = table.destinations
    t0 = table.now_ms() - 10_000  # on the Redis clock: they waited 10 s already

    def request(gid: str | None, offset: int) -> RouteRequest:
        return RouteRequest(gid, False, 600_000, f"{lane}/{offset}", lane)

    assert table.route([request("g1", 0)], now_ms=t0, batch="b1").decisions == [dest]
    waiting = table.route([request("g2", 1), request(None, 2)], now_ms=t0 + 1, batch="b2")
    assert waiting.decisions == [room.WAIT, room.WAIT]
    table.settle("b1", [dest], [])
    table.settle("b2", [], [])

    sweeper = Sweeper(s, redis_client=redis_client)
    assert sweeper.run_once().wait_timeouts == 2
    assert sweeper.run_once().wait_timeouts == 0  # said once
    assert set(table.room()) == {"g2", f"~{lane}"} and table.loads() == {dest: 1}
    assert table.stats().get("shared", 0) == 0 and table.admitted() == {}
    got = read_records(s, s.topology.events_topic, events.GROUP_WAIT_TIMED_OUT, 2)
    assert sorted((e["guarantee_id"], e["outcome"], e["destination"]) for e in got) == [
        ("g2", "WAITING", None),
        (f"~{lane}", "WAITING", None),
    ]

    # g1 ends: the oldest waiting group is admitted, as if it had never timed out
    table.route([RouteRequest("g1", True, 600_000, f"{lane}/3", lane)], batch="b3")
    table.settle("b3", [], [("g1", f"{lane}/3")])
    assert table.admitted() == {"g2": dest} and set(table.room()) == {f"~{lane}"}


def test_the_explicit_share_policy_admits_a_timed_out_group_to_a_busy_destination(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    s = topology(
        topology={"receive_units": 1},
        routing={"max_wait_ms": 1_000, "wait_timeout_policy": "share"},
    )
    lane = f"{s.topology.send_queues[0]}/0"
    table = table_for(s, "send", redis_client)
    (dest,) = table.destinations
    t0 = table.now_ms() - 10_000
    table.route([RouteRequest("g1", False, 600_000, f"{lane}/0", lane)], now_ms=t0, batch="b1")
    table.route([RouteRequest("g2", False, 600_000, f"{lane}/1", lane)], now_ms=t0, batch="b2")
    assert Sweeper(s, redis_client=redis_client).run_once().wait_timeouts == 1
    assert table.admitted() == {"g2": dest} and table.loads() == {dest: 2}
    (event,) = read_records(s, s.topology.events_topic, events.GROUP_WAIT_TIMED_OUT, 1)
    assert (event["outcome"], event["destination"]) == ("SHARED", dest)


def test_a_time_out_reported_while_the_events_producer_fails_is_published_later(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """The script that reports a time-out also keeps its event in the table's waits outbox
    until Kafka acknowledged it: a producer that fails fatally at that moment (here: a
    transactional one fenced, which learns it in the round's flush) is replaced, and the
    next round publishes the event. Before, the time-out was marked reported and its event
    lost for good."""
    s = topology(
        topology={"receive_units": 1},
        routing={"max_wait_ms": 1_000},
        sweeper={"interval_ms": 100},
    )
    lane = f"{s.topology.send_queues[0]}/0"
    table = table_for(s, "send", redis_client)
    (dest,) = table.destinations
    t0 = table.now_ms() - 10_000
    table.route([RouteRequest("g1", False, 600_000, f"{lane}/0", lane)], now_ms=t0, batch="b1")
    table.route([RouteRequest("g2", False, 600_000, f"{lane}/1", lane)], now_ms=t0, batch="b2")
    table.settle("b1", [dest], [])
    table.settle("b2", [], [])

    sweeper = Sweeper(s, redis_client=redis_client)
    # it learns of the fence in the round's flush
    sweeper._events.producer = FencedProducer(
        s.kafka.bootstrap_servers, s.topology.events_topic, knows=False
    )
    runner = threading.Thread(target=sweeper.run, name="sweeper", daemon=True)
    runner.start()
    try:

        def published() -> bool:  # reported (the outbox filled), then the outbox emptied
            return bool(sweeper.metrics.counters["wait_timeouts"]) and not table.waits_out(10)

        wait_until(published, 60, "the time-out reported and its event published")
    finally:
        sweeper.request_stop()
        runner.join(30)
    assert not runner.is_alive()
    assert sweeper.metrics.counters["producer_restarts"] == 1
    assert sweeper.metrics.counters["wait_timeouts"] == 1  # reported once
    (event,) = read_records(s, s.topology.events_topic, events.GROUP_WAIT_TIMED_OUT, 1)
    assert (event["guarantee_id"], event["outcome"]) == ("g2", "WAITING")
