"""The Spark benchmark's figures (`make spark-bench`), pure: no Spark, no servers.

* `batches`: the receiver's micro-batches from its `StreamingQueryProgress` JSON, each
  with its commit time: the progress `timestamp` (the trigger's start) plus
  `durationMs.triggerExecution`, which ends after the commit log's record is written.
* `batch_of_files`: which micro-batch wrote which Parquet file, from the file sink's log
  (`<output>/_spark_metadata/<batch>`, or `<batch>.compact` listing earlier batches too).
* `latencies_ms`: a group's completion latency, from its last member's creation time
  (`created_at` in the payload) to the commit of the micro-batch that emitted it.
* `steady_rate`: messages committed per second over the batches committed in a window.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ops.harness.stats import percentile

GOAL_RATE = 5_000.0  # messages per second, sustained, end to end
GOAL_P99_MS = 10_000.0  # group-completion latency, p99, at GOAL_RATE (issue 31)
LIGHT_P99_MS = 3_000.0  # group-completion latency, p99, at half GOAL_RATE (issue 31)
# Before issue 31 (make spark-bench on fresh clones, 2026-11-25/28; the micro-batch sender,
# the only one then): (sustained msg/s, group p99 ms) at GOAL_RATE and at half of it.
BEFORE_DATES = "2026-11-25/28"
BEFORE = {GOAL_RATE: (5_121.0, 38_200.0), GOAL_RATE / 2: (2_508.0, 11_500.0)}


def before_for(offered: float | None) -> tuple[float, float]:
    """The (sustained msg/s, p99 ms) before issue 31 at the load nearest `offered`."""
    if offered is None or offered >= GOAL_RATE:
        return BEFORE[GOAL_RATE]
    return BEFORE[GOAL_RATE / 2]


KEEP_UP = 0.95  # below GOAL_RATE: the share of the offered load to sustain
PHASES = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


@dataclass(frozen=True)
class Batch:
    batch_id: int
    started_ms: int  # the progress timestamp: the trigger's start
    committed_ms: int  # started_ms + durationMs.triggerExecution
    input_rows: int
    durations: dict[str, int] = field(default_factory=dict)


def epoch_ms(timestamp: str) -> int:
    """A progress timestamp (`2025-01-02T03:04:05.678Z`, UTC) in ms since the epoch."""
    return round(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def batches(progress: Iterable[Mapping[str, Any]]) -> list[Batch]:
    """The micro-batches that ran (an `addBatch` phase), by batch ID; a batch reported
    twice keeps its last report."""
    out: dict[int, Batch] = {}
    for p in progress:
        durations = {k: int(v) for k, v in (p.get("durationMs") or {}).items()}
        if "addBatch" not in durations or "triggerExecution" not in durations:
            continue
        started = epoch_ms(p["timestamp"])
        out[int(p["batchId"])] = Batch(
            int(p["batchId"]),
            started,
            started + durations["triggerExecution"],
            int(p.get("numInputRows", 0)),
            durations,
        )
    return [out[k] for k in sorted(out)]


def read_sink_log(directory: Path) -> dict[int, list[str]]:
    """The file sink's log: batch ID -> the files its entry lists (a compact entry lists
    every earlier batch's files as well)."""
    logs: dict[int, list[str]] = {}
    for path in directory.iterdir():
        name = path.name.removesuffix(".compact")
        if not name.isdigit():
            continue
        entries = [json.loads(line) for line in path.read_text().splitlines()[1:] if line]
        logs[int(name)] = [e["path"] for e in entries if e.get("action", "add") == "add"]
    return logs


def file_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def batch_of_files(logs: Mapping[int, Iterable[str]]) -> dict[str, int]:
    """File name -> the batch that wrote it: the first batch whose entry lists it."""
    out: dict[str, int] = {}
    for batch_id in sorted(logs):
        for path in logs[batch_id]:
            out.setdefault(file_name(path), batch_id)
    return out


def latencies_ms(
    groups: Iterable[tuple[int, int]],
    committed_ms: Mapping[int, int],
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> list[int]:
    """(batch ID, last member's creation ms) per group -> commit ms - creation ms, for
    groups created in [since_ms, until_ms]. A group of a batch with no commit time is a
    KeyError: every batch in the output committed."""
    out = []
    for batch_id, created in groups:
        if since_ms is not None and created < since_ms:
            continue
        if until_ms is not None and created > until_ms:
            continue
        out.append(committed_ms[batch_id] - created)
    return out


@dataclass(frozen=True)
class Rate:
    per_second: float
    messages: int  # counted: every batch in the window but the first
    seconds: float
    batches: int


def steady_rate(points: Sequence[tuple[int, int]], start_ms: int, end_ms: int) -> Rate:
    """(commit ms, messages) per batch -> the messages of the batches committed in
    [start_ms, end_ms], but the first, over the time from its commit to the last's."""
    inside = sorted(p for p in points if start_ms <= p[0] <= end_ms)
    if len(inside) < 2:
        return Rate(0.0, 0, 0.0, len(inside))
    seconds = (inside[-1][0] - inside[0][0]) / 1000
    messages = sum(m for _, m in inside[1:])
    return Rate(messages / seconds if seconds > 0 else 0.0, messages, seconds, len(inside))


def profile(window: Sequence[Batch]) -> dict[str, float]:
    """Mean ms per phase (`durationMs`) over the given batches."""
    if not window:
        return {}
    keys = [k for k in PHASES if any(k in b.durations for b in window)]
    return {k: sum(b.durations.get(k, 0) for b in window) / len(window) for k in keys}


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    vals = list(values)
    return {
        "groups": float(len(vals)),
        "p50_ms": percentile(vals, 0.50),
        "p99_ms": percentile(vals, 0.99),
        "max_ms": max(vals) if vals else float("nan"),
    }


def goal_for(offered: float | None) -> tuple[float, float]:
    """(sustained msg/s, p99 ms) a run offered `offered` msg/s must reach: at GOAL_RATE
    or more, GOAL_RATE with p99 <= 10 s; below it, the load kept up (KEEP_UP of it) with
    p99 <= 3 s. None: GOAL_RATE's."""
    if offered is None or offered >= GOAL_RATE:
        return GOAL_RATE, GOAL_P99_MS
    return KEEP_UP * offered, LIGHT_P99_MS


def goal_met(rate: float, p99_ms: float, offered: float | None = None) -> bool:
    need_rate, need_p99 = goal_for(offered)
    return rate >= need_rate and p99_ms <= need_p99
