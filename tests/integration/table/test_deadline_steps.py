"""Update times in steps (`DUE_STEPS`, prelude.lua; `router.table.routing.updated_at`): the
route script writes an entry's last use rounded up to a step of a sixteenth of its TTL, so
a busy group's entry and its deadline change once per step, and a member in the same step
writes nothing; the entry is never swept before a TTL after its group's last message, at
most a step later. The sweep still checks each candidate against its entry (earlier
versions left a score up to a step early), so what it removes, and in what order, is
what the entries' deadlines say."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from router.table.routing import RouteRequest, updated_at
from router.table.store.management import ManagementTable, TableKeys
from tests.fixtures.helpers import unique

T0 = 1_000_000  # the calls' clock (ms): a step boundary
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


def raw(t: ManagementTable, gid: str) -> bytes:
    value = t.client.hget(t.keys.entries, gid)
    assert isinstance(value, bytes)
    return value


def test_a_busy_groups_entry_changes_once_per_step(table: ManagementTable) -> None:
    table.route([member("g", "q/0", 0)], now_ms=T0 + 1)
    assert updated_at(T0 + 1, TTL) == T0 + 1_000
    entry = table.entry("g")
    assert entry is not None and (entry.opened_ms, entry.updated_ms) == (T0 + 1, T0 + 1_000)
    assert entry.routed == 0 and score(table, "g") == T0 + 1_000 + TTL
    before = raw(table, "g")
    # the same step: nothing written (the last number stays the one of the last write)
    table.route([member("g", "q/0", 1)], now_ms=T0 + 400, batch="b2")
    table.route([member("g", "q/0", 2)], now_ms=T0 + 1_000, batch="b3")
    assert raw(table, "g") == before and score(table, "g") == T0 + 1_000 + TTL
    # the next step: the entry, its last number and its deadline, exact
    table.route([member("g", "q/0", 3)], now_ms=T0 + 1_001, batch="b4")
    entry = table.entry("g")
    assert entry is not None and (entry.updated_ms, entry.routed) == (T0 + 2_000, 3)
    assert score(table, "g") == T0 + 2_000 + TTL == entry.deadline_ms


def test_an_entry_lives_a_ttl_after_its_last_message_and_at_most_a_step_more(
    table: ManagementTable,
) -> None:
    table.route([member("g", "q/0", 0)], now_ms=T0 + 10)
    table.route([member("g", "q/0", 1)], now_ms=T0 + 990, batch="b2")  # written nothing
    last = T0 + 990
    assert table.sweep(10, now_ms=last + TTL) == []  # a TTL after its last message: kept
    assert table.sweep(10, now_ms=T0 + 1_000 + TTL) == []  # its deadline: not past it yet
    swept = table.sweep(10, now_ms=T0 + 1_000 + TTL + 1)  # under a step after
    assert [s.guarantee_id for s in swept] == ["g"] and swept[0].entry.updated_ms == T0 + 1_000


def test_the_sweep_rescores_an_early_score_of_an_earlier_version(
    table: ManagementTable,
) -> None:
    table.route([member("g1", "q/0", 0)], now_ms=T0)
    table.route([member("g2", "q/1", 0)], now_ms=T0 + 500, batch="b2")
    table.route([member("g1", "q/0", 1)], now_ms=T0 + 900, batch="b3")
    # g1's update time is T0 + 1,000, as g2's; an earlier version's score, 900 ms early
    table.client.zadd(table.keys.deadlines, {"g1": T0 + 100 + TTL})
    # Past g1's score, before its deadline: nothing goes, g1's score is exact again.
    assert table.sweep(10, now_ms=T0 + TTL + 200) == []
    assert score(table, "g1") == T0 + 1_000 + TTL == score(table, "g2")
    # Past both deadlines, one at a time, in the order of the exact ones (ties by ID).
    first = table.sweep(1, now_ms=T0 + TTL + 1_001)
    assert [s.guarantee_id for s in first] == ["g1"]
    assert [s.guarantee_id for s in table.sweep(1, now_ms=T0 + TTL + 1_001)] == ["g2"]
    assert table.entries() == {}


def test_an_early_score_does_not_reorder_a_sweep_with_a_limit(table: ManagementTable) -> None:
    table.route([member("g1", "q/0", 0)], now_ms=T0 + 2_000)
    table.route([member("g2", "q/1", 0)], now_ms=T0 + 500, batch="b2")
    table.client.zadd(table.keys.deadlines, {"g1": T0 + TTL})  # early, as before
    # Without the check, g1's early score would make it the first to go.
    swept = table.sweep(1, now_ms=T0 + TTL + 2_001)
    assert [s.guarantee_id for s in swept] == ["g2"]
    assert table.entry("g1") is not None
