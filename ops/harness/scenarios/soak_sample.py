"""The soak's sampler: what a long run records every few seconds.

* `rss:<role>#<slot>`: each router process's resident memory (`VmRSS` of /proc/<pid>/status),
  per role slot: a unit killed and restarted is replaced in its slot, and the sample keeps
  the pid, so that growth is judged over one process's life (`soak_growth.longest_life`);
* `redis_memory` (`INFO memory` used_memory, bytes) and `redis_keys` (`DBSIZE`): the private
  stack's Redis holds this run only;
* `table:<side>:<key>`: the size of each of both tables' keys (HLEN, ZCARD, LLEN, SCARD):
  entries, writers, owners, done, room, parks, ...;
* `topic:<name>`: messages held (end offset minus earliest, summed over its partitions);
* `lag:<side>`: the units' consumer group's lag (end offsets minus committed, summed).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from ops.harness.stack.fleet import Proc
from ops.harness.stack.pipeline import Pipeline
from router.backends.kafka import clients
from router.backends.redis.client import redis_client
from router.table.store.codec import TableKeys
from router.topology.side import side_spec
from router.topology.topics import plan

ROLES = ("send-unit", "receive-unit", "sweeper")
_SIZE = {"hash": "hlen", "zset": "zcard", "list": "llen", "set": "scard"}


def rss_bytes(pid: int) -> int | None:
    """VmRSS of a live process, in bytes; None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


@dataclass
class Slots:
    """Role slots: slot n of a role is its n-th process at the start, then whichever
    process replaced it after a death (the lowest free slot takes a new process)."""

    held: dict[str, dict[int, Proc]] = field(default_factory=dict)

    def update(self, procs: Iterable[Proc]) -> None:
        procs = list(procs)
        for role in ROLES:
            slots = self.held.setdefault(role, {})
            taken = {id(p) for p in slots.values()}
            new = [p for p in procs if p.role == role and p.alive and id(p) not in taken]
            for p in sorted(new, key=lambda p: p.index):
                free = [n for n, q in sorted(slots.items()) if not q.alive]
                slots[free[0] if free else len(slots) + 1] = p

    def proc(self, role: str, slot: int) -> Proc | None:
        p = self.held.get(role, {}).get(slot)
        return p if p is not None and p.alive else None

    def items(self) -> Iterable[tuple[str, Proc]]:
        for role, slots in self.held.items():
            for n, p in sorted(slots.items()):
                yield f"{role}#{n}", p


class Sampler:
    """Takes one sample of everything (`sample`) and keeps them: `rows` (one dict per
    sample, `t` in seconds since the start) and `pids` (slot -> the pid of each sample)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        s = pipeline.settings
        self.redis: Any = redis_client(s.redis)
        self.tables = {
            side: TableKeys.of(s.redis.key_prefix, s.topology.name, side)
            for side in ("send", "receive")
        }
        self.groups = {side: side_spec(s, side) for side in ("send", "receive")}
        self.topics = [t.name for t in plan(s)]
        self._admin = AdminClient(clients.admin_config(s.kafka))
        self._consumer = Consumer(
            {
                **clients.admin_config(s.kafka),
                "group.id": f"{pipeline.name}.soak-sampler",
                "enable.auto.commit": False,
            }
        )
        self.slots = Slots()
        self.rows: list[dict[str, float]] = []
        self.pids: dict[str, list[int]] = {}

    def close(self) -> None:
        self._consumer.close()

    def sample(self, t: float) -> dict[str, float]:
        row: dict[str, float] = {"t": round(t, 2)}
        self.slots.update(self.pipeline.fleet.procs)
        for name, proc in self.slots.items():
            rss = rss_bytes(proc.popen.pid) if proc.alive else None
            if rss is not None:
                row[f"rss:{name}"] = rss
                self.pids.setdefault(f"rss:{name}", []).append(proc.popen.pid)
        row.update(self._redis())
        row.update(self._kafka())
        self.rows.append(row)
        return row

    def _redis(self) -> dict[str, float]:
        out: dict[str, float] = {}
        try:
            out["redis_memory"] = float(self.redis.info("memory")["used_memory"])
            out["redis_keys"] = float(self.redis.dbsize())
            for side, keys in self.tables.items():
                names = keys.all()
                pipe = self.redis.pipeline(transaction=False)
                for k in names:
                    pipe.type(k)
                types = [t.decode() if isinstance(t, bytes) else t for t in pipe.execute()]
                pipe = self.redis.pipeline(transaction=False)
                judged = [(k, t) for k, t in zip(names, types, strict=True) if t in _SIZE]
                for k, t in judged:
                    getattr(pipe, _SIZE[t])(k)
                for (k, _), n in zip(judged, pipe.execute(), strict=True):
                    out[f"table:{side}:{k.rsplit(':', 1)[1]}"] = float(n)
        except Exception:  # Redis away (a restart): this sample has no Redis figures
            return {}
        return out

    def _kafka(self) -> dict[str, float]:
        out: dict[str, float] = {}
        ends: dict[tuple[str, int], int] = {}
        try:
            meta = self._admin.list_topics(timeout=5).topics
            for name in self.topics:
                if name not in meta:
                    continue
                held = 0
                for p in meta[name].partitions:
                    low, high = self._consumer.get_watermark_offsets(
                        TopicPartition(name, p), timeout=5, cached=False
                    )
                    ends[(name, p)] = high
                    held += high - low
                out[f"topic:{name}"] = float(held)
            for side, spec in self.groups.items():
                request = [ConsumerGroupTopicPartitions(spec.group_id)]
                result = self._admin.list_consumer_group_offsets(request)[spec.group_id]
                committed = result.result(timeout=5).topic_partitions
                lag = 0
                for tp in committed:
                    end = ends.get((tp.topic, tp.partition))
                    if end is not None:
                        lag += end - max(tp.offset, 0)
                out[f"lag:{side}"] = float(lag)
        except Exception:  # the broker away: this sample has no Kafka figures
            return out
        return out

    def series(self) -> dict[str, list[tuple[float, float]]]:
        """Name -> (t, value) of each sample that has it. A table key is absent from Redis
        while empty (the `admitted` hash, a drained room): 0 in every sample Redis answered."""
        out: dict[str, list[tuple[float, float]]] = {}
        tables = sorted({k for row in self.rows for k in row if k.startswith("table:")})
        for row in self.rows:
            for k, v in row.items():
                if k != "t":
                    out.setdefault(k, []).append((row["t"], v))
            if "redis_keys" in row:
                for k in tables:
                    if k not in row:
                        out.setdefault(k, []).append((row["t"], 0.0))
        for points in out.values():
            points.sort()
        return out

    def rss_slots(self) -> dict[str, list[tuple[float, float, int]]]:
        """Slot -> (t, RSS, pid) of each sample."""
        out: dict[str, list[tuple[float, float, int]]] = {}
        for name, points in self.series().items():
            if name.startswith("rss:"):
                out[name] = [
                    (t, v, pid) for (t, v), pid in zip(points, self.pids[name], strict=True)
                ]
        return out

    def write_csv(self, path: Path) -> None:
        columns = ["t", *sorted({k for row in self.rows for k in row if k != "t"})]
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, columns, restval="")
            w.writeheader()
            for row in self.rows:
                zeros = {k: 0.0 for k in columns if k.startswith("table:") and k not in row}
                w.writerow({**row, **(zeros if "redis_keys" in row else {})})
