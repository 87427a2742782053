"""A chaos run that does not catch up leaves the tables as they stood beside its logs; at
its end every table, each cell's, is judged at rest."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from ops.harness.scenarios.table_dump import dump_tables, tables_at_rest
from router.config import RedisSettings, RouterSettings, TopologySettings
from router.table.store.codec import TableKeys
from router.topology.cells import tag
from tests.fixtures.helpers import unique


def test_every_existing_key_of_both_tables_is_written(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    name = unique("dump")
    settings = RouterSettings(
        redis=RedisSettings(url=redis_url, key_prefix="router-dump"),
        topology=TopologySettings(name=name),
    )
    send = TableKeys.of("router-dump", name, "send")
    receive = TableKeys.of("router-dump", name, "receive")
    keys = [send.all()[0], receive.all()[1]]
    try:
        redis_client.hset(keys[0], "g1", "entry")
        redis_client.zadd(keys[1], {"g2": 5})
        written = dump_tables(settings, tmp_path / "dump.json")
        dumped = json.loads((tmp_path / "dump.json").read_text())
    finally:
        redis_client.delete(*keys)
    assert written == 2
    assert dumped[keys[0]] == {"hash": {"g1": "entry"}}
    assert dumped[keys[1]] == {"zset": [["g2", 5.0]]}


def test_every_cells_tables_are_dumped_and_judged_at_rest(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Cell 2's tables (`router.topology.cells`) are read as cell 0's are: a group left in
    cell 2's receive table is dumped and makes that table, named so, not clean."""
    name = unique("dump-cells")
    settings = RouterSettings(
        redis=RedisSettings(url=redis_url, key_prefix="router-dump"),
        topology=TopologySettings(name=name, cells=3),
    )
    entries = TableKeys.of("router-dump", tag(name, 2), "receive").entries
    try:
        redis_client.hset(entries, "g1", "entry")
        written = dump_tables(settings, tmp_path / "dump.json")
        dumped = json.loads((tmp_path / "dump.json").read_text())
        reports, _ = tables_at_rest(settings)
    finally:
        redis_client.delete(entries)
    assert written == 1 and dumped[entries] == {"hash": {"g1": "entry"}}
    assert [r.side for r in reports] == [
        "send", "receive", "send (cell 1)", "receive (cell 1)", "send (cell 2)", "receive (cell 2)",
    ]  # fmt: skip
    assert [r.clean for r in reports] == [True] * 5 + [False]
    assert reports[-1].leftovers == {"entries": 1}
