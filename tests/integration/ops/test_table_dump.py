"""A chaos run that does not catch up leaves the tables as they stood beside its logs."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from ops.harness.scenarios.table_dump import dump_tables
from router.config import RedisSettings, RouterSettings, TopologySettings
from router.table.store.codec import TableKeys
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
