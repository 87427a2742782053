"""Two unit processes racing on the same new group IDs never produce two assignments."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import redis

from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable, TableKeys

DESTS = [str(i) for i in range(4)]
GIDS = [f"order-{i}" for i in range(600)]


def race(url: str, prefix: str, unit: str, start: Any, out: Any) -> None:
    table = ManagementTable(redis.Redis.from_url(url), TableKeys.of(prefix, "race", "send"), DESTS)
    start.wait()
    decided: dict[str, str] = {}
    # Small batches, so the two processes' scripts interleave. The same lane, as when a
    # partition moves between units and both still route its messages for a moment.
    for i in range(0, len(GIDS), 5):
        chunk = GIDS[i : i + 5]
        requests = [RouteRequest(g, False, 60_000, "", "q/0") for g in chunk]
        result = table.route(requests, batch=f"{unit}:{i}")
        decided.update(zip(chunk, result.decisions, strict=True))
    out.put(decided)


def test_two_processes_racing_on_new_groups_agree(redis_url: str, redis_prefix: str) -> None:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=race, args=(redis_url, redis_prefix, u, start, out))
        for u in ("unit-a", "unit-b")
    ]
    for proc in procs:
        proc.start()
    start.set()
    results = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    a, b = results
    assert a == b, "the two units saw different destinations for the same group"
    table = ManagementTable(
        redis.Redis.from_url(redis_url), TableKeys.of(redis_prefix, "race", "send"), DESTS
    )
    assert len(table.entries()) == len(GIDS)
    assert sum(table.loads().values()) == len(GIDS)
    assert table.stats()["created"] == len(GIDS)  # each group created exactly once
