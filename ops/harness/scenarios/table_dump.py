"""Evidence for a run that did not catch up: every Redis key of the topology's tables
(both sides) written as JSON beside the run's logs, so that what held a destination, or
what a waiting group waits behind, can be read after the servers are gone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from router.backends.redis.client import redis_client
from router.config import RouterSettings
from router.table.store.codec import TableKeys

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


def dump_tables(settings: RouterSettings, path: Path) -> int:
    """Write every key of both sides' tables that exists to `path`; returns how many."""
    r = redis_client(settings.redis)
    out: dict[str, Any] = {}
    for side in SIDES:
        for key in TableKeys.of(settings.redis.key_prefix, settings.topology.name, side).all():
            if r.exists(key):
                out[key] = _plain(_value(r, key))
    path.write_text(json.dumps(out, indent=1, sort_keys=True, default=str))
    return len(out)
