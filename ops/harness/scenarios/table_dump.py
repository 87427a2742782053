"""The topology's tables read after a run: every Redis key of both sides of every cell
(`router.topology.cells`) written as JSON beside the run's logs (evidence for a run that did
not catch up, or whose tables were not clean at rest: what held a destination, what a
waiting group waits behind, readable after the servers are gone), and every table judged at
rest (`ops.harness.verdict.rest`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from ops.harness.verdict.rest import EMPTY, LEASES, RestReport, Snapshot, at_rest
from router.backends.redis.client import redis_client
from router.config import RouterSettings
from router.table.store.codec import TableKeys
from router.topology.cells import all_cells, tag

SIDES: tuple[Literal["send"], Literal["receive"]] = ("send", "receive")


def _value(r: Any, key: str) -> Any:
    kind = r.type(key)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind == "hash":
        return {"hash": r.hgetall(key)}
    if kind == "zset":
        return {"zset": r.zrange(key, 0, -1, withscores=True)}
    if kind == "set":
        return {"set": sorted(r.smembers(key))}
    if kind == "list":
        return {"list": r.lrange(key, 0, -1)}
    if kind == "stream":
        return {"stream": r.xrange(key, count=1000)}
    if kind == "string":
        return {"string": r.get(key)}
    return {kind: None}


def _plain(x: Any) -> Any:
    if isinstance(x, bytes):
        return x.decode(errors="replace")
    if isinstance(x, dict):
        return {_plain(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x


def tables(settings: RouterSettings) -> Iterator[tuple[str, TableKeys]]:
    """Every table of the topology, named for reports ("send", "receive"; a cell past the
    first: "send (cell 1)"), with its keys: each side of cell 0, then of cell 1, ..."""
    for cell in all_cells(settings):
        for side in SIDES:
            name = side if cell == 0 else f"{side} (cell {cell})"
            yield (
                name,
                TableKeys.of(settings.redis.key_prefix, tag(settings.topology.name, cell), side),
            )


def dump_tables(settings: RouterSettings, path: Path) -> int:
    """Write every key of every table that exists to `path`; returns how many."""
    r = redis_client(settings.redis)
    out: dict[str, Any] = {}
    for _, keys in tables(settings):
        for key in keys.all():
            if r.exists(key):
                out[key] = _plain(_value(r, key))
    path.write_text(json.dumps(out, indent=1, sort_keys=True, default=str))
    return len(out)


def _pairs(r: Any, key: str) -> list[tuple[str, str]]:
    """A key's contents as (member, value) pairs of text (`ops.harness.verdict.rest`)."""
    value = _plain(_value(r, key))
    kind, contents = next(iter(value.items()))
    if kind == "hash":
        return [(str(k), str(v)) for k, v in contents.items()]
    if kind == "zset":
        return [(str(m), str(score)) for m, score in contents]
    if kind in ("set", "list"):
        return [(str(m), "") for m in contents]
    return [] if contents is None else [(str(contents), "")]


def tables_at_rest(settings: RouterSettings) -> tuple[list[RestReport], int]:
    """Every table (both sides of every cell) judged at rest (call it once every unit
    stopped), and the Redis clock (ms) they were judged at: leases live past it are
    leftovers."""
    r: Any = redis_client(settings.redis)
    seconds, micros = r.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    reports = []
    names = (*EMPTY, *LEASES, "load")
    for table, keys in tables(settings):
        snapshot = Snapshot(table, {n: _pairs(r, getattr(keys, n)) for n in names})
        reports.append(at_rest(snapshot, now_ms))
    return reports, now_ms
