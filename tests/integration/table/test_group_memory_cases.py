"""A caller's memory of its groups (`router.table.store.memory`) in two histories a review
found (2026-12-02): two tables on distinct keys in one Redis, one whose callers remember
their groups and one whose callers send every message (`remember=False`), the same
operations on both, then the decisions, the tables' keys and the route calls compared.
Each test failed on the first version of the memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from router.table.routing import RouteRequest
from router.table.store.management import CALL_REQUESTS, ManagementTable, TableKeys
from tests.fixtures.helpers import unique

LANE = "q/0"


@pytest.fixture
def client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def pair(client: redis.Redis) -> Iterator[tuple[ManagementTable, ManagementTable]]:
    """(with the memory, without), on distinct keys, both claiming LANE."""
    dests = ["d0", "d1"]
    a = ManagementTable(client, TableKeys.of(unique("memrev"), "t", "send"), dests, "share")
    b = ManagementTable(
        client,
        TableKeys.of(unique("memrev"), "t", "send"),
        dests,
        "share",
        remember=False,
    )
    for t in (a, b):
        t.claim([LANE])
    yield a, b
    a.drop()
    b.drop()


def state(t: ManagementTable) -> dict[str, Any]:
    r: Any = t.client
    out: dict[str, Any] = {}
    for name in ("entries", "load", "stats", "admitted"):
        out[name] = r.hgetall(getattr(t.keys, name))
    for name in ("deadlines", "closing", "room", "inflight"):
        out[name] = r.zrange(getattr(t.keys, name), 0, -1, withscores=True)
    out["stats"].pop(b"remembered", None)  # (counts what the memory decided)
    out["cursor"] = r.get(t.keys.cursor)
    return out


def route_both(
    pair: tuple[ManagementTable, ManagementTable], requests: list[RouteRequest], **kw: Any
) -> list[str]:
    got = [t.route(requests, **kw).decisions for t in pair]
    assert got[0] == got[1], f"decisions: memory {got[0]} != without {got[1]}"
    return got[0]


def member(gid: str, n: int, **kw: Any) -> RouteRequest:
    return RouteRequest(gid, False, 16_000, f"{LANE}/{n}", LANE, continuation=True, **kw)


class Counting:
    """Counts the route script's invocations (Redis round trips of route calls)."""

    def __init__(self, table: ManagementTable) -> None:
        self.calls = 0
        self._inner = table._route
        table._route = self

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        return self._inner(*args, **kw)


def test_a_carried_final_after_its_release_and_a_batch_over_one_call(
    pair: tuple[ManagementTable, ManagementTable],
) -> None:
    """Batch b1 routes G's first member and its final (q/0/2); b1 commits and its final is
    released while the next batch b2, formed while b1 was in flight, still carries b1's
    finals (`carried`). b2 takes two route calls (CALL_REQUESTS + 1 messages): the first
    creates G anew (the ID reused: remembered), the second carries (G, 'q/0/2') again and
    has one more plain member of G, with a lane-order number. The script reads a carried
    group's entry before the batch, so that member takes the general path and writes the
    entry's `routed`; the memory decided it locally and left `routed` as it was. A carried
    group is now sent (`GroupMemory.split`)."""
    a, b = pair
    route_both(
        pair,
        [
            RouteRequest("G", False, 16_000, f"{LANE}/1", LANE),
            RouteRequest("G", True, 16_000, f"{LANE}/2", LANE, continuation=True),
        ],
        now_ms=1_000_000_000,
        batch="b1",
    )
    for t in pair:
        assert t.release([("G", f"{LANE}/2")]) == 1
    ordinary = [
        RouteRequest(None, False, 16_000, f"{LANE}/{n}", LANE) for n in range(4, CALL_REQUESTS + 3)
    ]
    b2 = [
        RouteRequest("G", False, 16_000, f"{LANE}/3", LANE, lane_seq=3),  # G anew (ID reused)
        *ordinary,
        member("G", CALL_REQUESTS + 3, lane_seq=CALL_REQUESTS + 3),  # in the second call
    ]
    assert len(b2) == CALL_REQUESTS + 1 and a.chunk_size == CALL_REQUESTS
    route_both(
        pair, b2, now_ms=1_000_000_100, batch="b2", carried=[("G", f"{LANE}/2")], earlier=["b1"]
    )
    assert a.memory is not None and a.memory.decided == 0  # G's final is carried: sent
    ea, eb = a.entry("G"), b.entry("G")
    assert ea == eb, f"G's entry: memory {ea} != without {eb}"
    assert state(a) == state(b)


def test_a_new_ttl_step_between_batches_costs_no_second_round_trip(
    pair: tuple[ManagementTable, ManagementTable],
) -> None:
    """A group's member in every batch, the batches further apart than a step of the TTL
    (TTL / 16: 62.5 ms at the smallest TTL allowed). The memory decided the member by the
    last reply's step, the script found the call in a later step and refused it as stale,
    and every batch cost two route calls. The memory now sends a member whose step has
    passed by the call's time (given here; else its own clock's estimate)."""
    a, b = pair
    counters = [Counting(t) for t in pair]
    now = 1_000_000_000
    ttl = 1_000
    route_both(pair, [RouteRequest("G", False, ttl, f"{LANE}/0", LANE)], now_ms=now, batch="b0")
    for n in range(1, 11):
        now += 100  # one batch every 100 ms; the step is 62 ms
        route_both(
            pair,
            [RouteRequest("G", False, ttl, f"{LANE}/{n}", LANE, continuation=True)],
            now_ms=now,
            batch=f"b{n}",
        )
    assert state(a) == state(b)
    assert a.memory is not None
    assert counters[0].calls <= counters[1].calls, (
        f"memory: {counters[0].calls} route calls ({a.memory.stale} refused as stale, "
        f"{a.memory.decided} decided from memory) vs {counters[1].calls} without"
    )


def test_a_sweep_then_redis_clock_back_into_the_remembered_step(
    pair: tuple[ManagementTable, ManagementTable],
) -> None:
    """G is remembered at a step; Redis's clock runs past G's deadline and the sweep removes
    G; then the clock goes back into that step (a failover to a host behind, a clock step).
    The step check alone would let the memory decide G's next member; the sweep's time
    (stats `swept_at`) makes the call stale, so it is sent and found an orphan, as without
    the memory."""
    a, b = pair
    now, ttl = 1_000_000_100, 16_000  # (not at a step boundary: the same step till +900)
    route_both(pair, [RouteRequest("G", False, ttl, f"{LANE}/1", LANE)], now_ms=now, batch="b1")
    route_both(pair, [member("G", 2)], now_ms=now + 1, batch="b2")  # remembered since b1
    assert a.memory is not None and a.memory.decided == 1
    assert a.stats()["remembered"] == 1 and a.stats()["messages"] == b.stats()["messages"] == 2
    later = now + 2 * ttl
    assert [[s.guarantee_id for s in t.sweep(10, later, later)] for t in pair] == [["G"], ["G"]]
    assert route_both(pair, [member("G", 3)], now_ms=now + 2, batch="b3") == ["!o"]
    assert a.memory.stale == 1 and a.memory.decided == 1
    assert state(a) == state(b)
