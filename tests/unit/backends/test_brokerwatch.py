"""A client left with no broker, told from its statistics (router.backends.kafka.brokerwatch)."""

from __future__ import annotations

import json

from router.backends.kafka.brokerwatch import NoBrokerWatch, known_brokers, watched


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def doc(*sources: str) -> str:
    brokers = {f"b{i}": {"nodename": f"b{i}", "source": s} for i, s in enumerate(sources)}
    return json.dumps({"name": "p", "brokers": brokers, "msg_cnt": 787})


def test_known_brokers_leave_out_the_logical_coordinators() -> None:
    assert known_brokers(json.loads(doc("learned", "logical", "configured"))) == 2
    assert known_brokers(json.loads(doc("logical", "logical"))) == 0
    assert known_brokers({"brokers": {}}) == 0
    assert known_brokers({}) == 0  # the chaos run's "brokers: " (none at all)


def test_no_broker_for_the_watch_time_is_stuck_and_a_broker_clears_it() -> None:
    clock = Clock()
    w = NoBrokerWatch(30, clock)
    w.stats(doc("learned"))
    clock.now += 5
    w.stats(doc())  # the broker forgotten
    clock.now += 29
    w.stats(doc("logical"))
    assert w.stuck() is None  # 29 s without
    clock.now += 1
    w.stats(doc())
    assert w.stuck() == 30.0
    clock.now += 5
    w.stats(doc("configured"))  # re-bootstrapped after all
    assert w.stuck() is None
    clock.now += 60
    w.stats(doc())
    assert w.stuck() is None  # counted from here again


def test_judged_on_the_documents_arrival_not_on_time_passing() -> None:
    """A client nobody polled sent no statistics: not stuck for the time nobody looked."""
    clock = Clock()
    w = NoBrokerWatch(30, clock)
    w.stats(doc())
    clock.now += 300
    assert w.stuck() is None
    w.stats(doc())
    assert w.stuck() == 300.0


def test_off_reset_and_unreadable_documents() -> None:
    clock = Clock()
    off = NoBrokerWatch(0, clock)
    off.stats(doc())
    clock.now += 1000
    off.stats(doc())
    assert off.stuck() is None
    w = NoBrokerWatch(10, clock)
    w.stats(doc())
    w.stats("not json")
    w.stats("[]")
    clock.now += 10
    w.stats(doc())
    assert w.stuck() == 10.0 and w.documents == 2
    w.reset()  # a new client
    assert w.stuck() is None


def test_watched_adds_statistics_and_keeps_the_callers_own() -> None:
    seen: list[str] = []
    w = NoBrokerWatch(30)
    conf = watched({"bootstrap.servers": "b:9092", "stats_cb": seen.append}, w)
    assert conf["statistics.interval.ms"] == 5000 and conf["bootstrap.servers"] == "b:9092"
    conf["stats_cb"](doc())
    assert seen == [doc()] and w.documents == 1
    assert watched({"statistics.interval.ms": 60_000}, w)["statistics.interval.ms"] == 60_000
    assert NoBrokerWatch(1.5).interval_ms == 1000 and NoBrokerWatch(9).interval_ms == 3000
    assert watched({"a": 1}, NoBrokerWatch(0)) == {"a": 1}
