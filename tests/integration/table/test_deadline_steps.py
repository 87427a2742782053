"""The deadlines set as the cheaper route script leaves it (`DUE_STEPS` in prelude.lua): a busy
group's score is written only when its deadline leaves its step of a sixteenth of the TTL,
so it may be early, never late; the sweep checks each candidate against its entry, so what
it removes, and in what order, is what the exact deadlines say."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable, TableKeys
from tests.fixtures.helpers import unique

T0 = 1_000_000  # the calls' clock (ms)
TTL = 16_000  # a step of 1,000 ms


@pytest.fixture
def table(redis_client: redis.Redis) -> Iterator[ManagementTable]:
    t = ManagementTable(redis_client, TableKeys.of(unique("due"), "t", "send"), ["d0", "d1"])
    yield t
    t.drop()


def member(gid: str, lane: str, offset: int) -> RouteRequest:
    return RouteRequest(
        gid, False, TTL, f"{lane}/{offset}", lane, continuation=offset > 0, lane_seq=offset
    )


def score(t: ManagementTable, gid: str) -> Any:
    return t.client.zscore(t.keys.deadlines, gid)


def test_a_busy_groups_score_moves_only_when_its_deadline_leaves_its_step(
    table: ManagementTable,
) -> None:
    table.route([member("g", "q/0", 0)], now_ms=T0)
    assert score(table, "g") == T0 + TTL
    table.route([member("g", "q/0", 1)], now_ms=T0 + 400, batch="b2")  # the same step
    entry = table.entry("g")
    assert entry is not None and entry.updated_ms == T0 + 400 and entry.routed == 1
    assert score(table, "g") == T0 + TTL  # early by 400 ms, not later than the deadline
    table.route([member("g", "q/0", 2)], now_ms=T0 + 1_100, batch="b3")  # the next step
    assert score(table, "g") == T0 + 1_100 + TTL


def test_the_sweep_removes_by_the_entries_deadlines_and_rescores_early_ones(
    table: ManagementTable,
) -> None:
    table.route([member("g1", "q/0", 0)], now_ms=T0)
    table.route([member("g2", "q/1", 0)], now_ms=T0 + 500, batch="b2")
    table.route([member("g1", "q/0", 1)], now_ms=T0 + 900, batch="b3")
    assert score(table, "g1") == T0 + TTL < T0 + 500 + TTL == score(table, "g2")
    # Past g1's score, before its deadline and g2's: nothing goes, g1's score is exact again.
    assert table.sweep(10, now_ms=T0 + TTL + 200) == []
    assert score(table, "g1") == T0 + 900 + TTL
    # Past both deadlines, one at a time: g2 first (its deadline is the earlier one).
    first = table.sweep(1, now_ms=T0 + TTL + 1_000)
    assert [s.guarantee_id for s in first] == ["g2"]
    assert [s.guarantee_id for s in table.sweep(1, now_ms=T0 + TTL + 1_000)] == ["g1"]
    assert table.entries() == {}


def test_an_early_score_left_by_route_does_not_reorder_a_sweep_with_a_limit(
    table: ManagementTable,
) -> None:
    table.route([member("g1", "q/0", 0)], now_ms=T0)
    table.route([member("g2", "q/1", 0)], now_ms=T0 + 500, batch="b2")
    table.route([member("g1", "q/0", 1)], now_ms=T0 + 900, batch="b3")
    # Without the check, g1's early score would make it the first to go.
    swept = table.sweep(1, now_ms=T0 + TTL + 1_000)
    assert [s.guarantee_id for s in swept] == ["g2"]
    assert table.entry("g1") is not None
