"""The writers hash does not grow without bound (`router/table/store/writers.py`): a caller of
the route script idle for the bound is forgotten, and forgetting one never looks like the
lost write that resets the table; a write really lost still does. Against the real Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from router.sweeper.horizon import HorizonReader
from router.sweeper.loop import Sweeper
from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable, TableKeys
from router.table.store.writers import WRITER_IDLE_S
from router.topology.side import table_for
from tests.fixtures.helpers import unique


@pytest.fixture
def pair(redis_client: redis.Redis) -> Iterator[tuple[ManagementTable, ManagementTable]]:
    keys = TableKeys.of(unique("writers"), "t", "send")
    a, b = (ManagementTable(redis_client, keys, ["d0", "d1"]) for _ in range(2))
    yield a, b
    a.drop()


def req(gid: str, lane: str) -> RouteRequest:
    return RouteRequest(gid, False, 60_000, "", lane)


def stamp_back(client: redis.Redis, table: ManagementTable, seconds: int) -> None:
    """As if `table`'s last route call was `seconds` ago by the server's clock."""
    writes, _ = client.hget(table.keys.writers, table.writer).decode().split("|")
    at = int(client.time()[0]) - seconds
    client.hset(table.keys.writers, table.writer, f"{writes}|{at}")


def test_an_idle_caller_is_forgotten_and_comes_back_without_a_reset(
    pair: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    a, b = pair
    a.route([req("G1", "A")])
    b.route([req("G2", "B")])
    redis_client.hset(a.keys.writers, "from-before-stamps", "17")
    stamp_back(redis_client, a, 2 * 3600)
    assert a.forget_idle_writers(idle_s=3600) == (1, 2)  # a forgotten; b and the old kept
    fields = {k.decode(): v.decode() for k, v in redis_client.hgetall(a.keys.writers).items()}
    assert set(fields) == {b.writer, "from-before-stamps"}
    assert fields["from-before-stamps"].startswith("17|")  # stamped, forgotten a bound on

    # a's next call comes after half the real bound: it does not ask for the check.
    assert a._routed_at is not None
    a._routed_at = time.monotonic() - WRITER_IDLE_S
    a.route([req("G3", "A")])
    assert a.resets == 0 and a.entry("G1") is not None
    assert a.writer in {k.decode() for k in redis_client.hkeys(a.keys.writers)}
    a.route([req("G4", "A")])  # checked again from here on
    b.route([req("G5", "B")])
    assert (a.resets, b.resets) == (0, 0)


def test_a_caller_that_was_not_idle_and_lost_its_write_still_resets(
    pair: tuple[ManagementTable, ManagementTable], redis_client: redis.Redis
) -> None:
    """The guard skips the check only after an idle spell: a missing field of a caller that
    routed a moment ago is a lost write, as before."""
    a, b = pair
    a.route([req("G1", "A")])
    b.route([req("G2", "B")])
    redis_client.hdel(a.keys.writers, a.writer)
    a.route([req("G3", "A")])
    assert a.resets == 1


def test_the_sweeper_forgets_idle_unit_processes(topology: Any) -> None:
    s = topology()
    sweeper = Sweeper(s, horizons=HorizonReader(s, unique("sweeper"), delivery_slack_ms=1_000))
    client = sweeper._redis
    table = table_for(s, "send", client)
    table.route([req("G1", "A")])
    stamp_back(client, table, WRITER_IDLE_S + 60)
    fresh = table_for(s, "send", client)
    fresh.route([req("G2", "B")])
    assert sweeper.run_once().writers_forgotten == 1
    assert {k.decode() for k in client.hkeys(table.keys.writers)} == {fresh.writer}
    stamp_back(client, fresh, WRITER_IDLE_S + 60)
    assert sweeper.run_once().writers_forgotten == 0  # not again within WRITERS_EVERY_S


def test_a_shorter_bound_is_every_process_s_and_the_sweeper_looks_more_often(
    topology: Any,
) -> None:
    """`sweeper.writer_idle_s` (make soak sets minutes, to see the hash at its plateau):
    the sweeper forgets by it and looks every half of it; a unit's table skips the lost-
    write check once after half of it idle, so a forgotten unit does not reset the table."""
    s = topology(sweeper={"writer_idle_s": 120})
    sweeper = Sweeper(s, horizons=HorizonReader(s, unique("sweeper"), delivery_slack_ms=1_000))
    client = sweeper._redis
    table = table_for(s, "send", client)
    assert table.writer_idle_s == 120
    table.route([req("G1", "A")])
    stamp_back(client, table, 60)
    assert sweeper.run_once().writers_forgotten == 0  # idle 60 s of 120: kept
    stamp_back(client, table, 121)
    assert sweeper.run_once().writers_forgotten == 0  # looked a moment ago
    sweeper._writers_at = time.monotonic() - 61  # half the bound since it looked
    assert sweeper.run_once().writers_forgotten == 1
    assert client.hlen(table.keys.writers) == 0
    # the unit comes back after more than half the bound: no check, no reset
    assert table._routed_at is not None
    table._routed_at = time.monotonic() - 61
    assert table.seen_writes() == ""
    table.route([req("G2", "A")])
    assert table.resets == 0 and table.entry("G1") is not None
