"""Measuring a stage: CPU seconds from /proc, a consumer group's committed offsets, the
window from its first commit to its last; and Redis's own cost (INFO commandstats, INFO
cpu) around a run."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from router.backends.kafka import clients
from router.backends.kafka.offsets import CommittedOffsets
from router.backends.redis.client import RedisClient
from router.config import RouterSettings

log = logging.getLogger("router.bench")

POLL_S = 0.02
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / CLK_TCK


class GroupWatch:
    """A consumer group's committed offsets over a set of partitions."""

    def __init__(
        self, reader: CommittedOffsets, group: str, partitions: list[TopicPartition]
    ) -> None:
        self.reader = reader
        self.group = group
        self.partitions = partitions

    def committed(self) -> dict[tuple[str, int], int]:
        try:
            return self.reader.read(self.group, self.partitions, timeout=10)
        except KafkaException as exc:
            log.debug("offsets of %s not readable yet: %s", self.group, exc)
            return {}


def high_watermarks(
    settings: RouterSettings, topics: Sequence[str], admin: AdminClient
) -> dict[tuple[str, int], int]:
    meta = admin.list_topics(timeout=30).topics
    consumer = Consumer({**clients.admin_config(settings.kafka), "group.id": "bench-watermarks"})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
            for t in topics
            for p in meta[t].partitions
        }
    finally:
        consumer.close()


def _done(
    committed: dict[tuple[str, int], int], ends: dict[tuple[str, int], int], slack: int
) -> bool:
    """Every partition committed up to its end. A transactional input ends with a commit
    marker after its last record, which no consumer commits past: `slack` = 1."""
    return all(committed.get(tp, 0) >= end - slack for tp, end in ends.items() if end > 0)


@dataclass
class _Window:
    started: float = 0.0
    at_start: int = 0
    cpu_start: float = 0.0


def measure(
    watches: list[
        tuple[
            GroupWatch, dict[tuple[str, int], int] | Callable[[], dict[tuple[str, int], int]], int
        ]
    ],
    pids: Sequence[int],
    total: int,
    timeout: float,
    alive: Callable[[], str | None],
    steady: SteadyRedis | None = None,
) -> tuple[float, int, float]:
    """Wait until every watched group has committed its input; returns (seconds,
    messages, cpu seconds) from the first commit of the first group to the last commit
    of the last one. Each watch is (group, end offsets or a function giving them once
    the previous group is done, slack). `steady` follows the first group's commits."""
    window = _Window()
    deadline = time.monotonic() + timeout
    for i, (watch, ends_or_fn, slack) in enumerate(watches):
        ends = ends_or_fn() if callable(ends_or_fn) else ends_or_fn
        while True:
            now = time.monotonic()
            committed = watch.committed()
            if i == 0 and not window.started and any(committed.values()):
                window = _Window(now, sum(committed.values()), cpu_seconds(pids))
            if i == 0 and steady is not None:
                steady.look(sum(committed.values()))
            if window.started and _done(committed, ends, slack):
                if i == 0 and steady is not None:
                    steady.end(sum(committed.values()))
                break
            dead = alive()
            if dead:
                raise RuntimeError(dead)
            if now > deadline:
                raise TimeoutError(
                    f"{watch.group} committed {sum(committed.values())} of "
                    f"{sum(ends.values())} in {timeout:.0f}s"
                )
            time.sleep(POLL_S)
    seconds = time.monotonic() - window.started
    return seconds, total - window.at_start, cpu_seconds(pids) - window.cpu_start


SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


@dataclass(frozen=True)
class RedisSnapshot:
    script_calls: int
    script_us: float  # server time inside scripts (the commands they call included)
    cpu_s: float  # the server's user + system CPU seconds, all threads
    main_cpu_s: float = 0.0  # the same, its main thread only (where commands run)

    def __sub__(self, other: RedisSnapshot) -> RedisSnapshot:
        return RedisSnapshot(
            self.script_calls - other.script_calls,
            self.script_us - other.script_us,
            self.cpu_s - other.cpu_s,
            self.main_cpu_s - other.main_cpu_s,
        )


def redis_snapshot(client: RedisClient) -> RedisSnapshot:
    """Redis's cumulative counters now: script calls and their microseconds (INFO
    commandstats; a command a script runs is counted inside the script's time, so only
    the script commands are summed), and the server's CPU (INFO cpu). Server-wide: a
    run measured while something else uses the same Redis counts that too."""
    stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
    calls, usec = 0, 0.0
    for name in SCRIPT_COMMANDS:
        s = stats.get(f"cmdstat_{name}")
        if s:
            calls += int(s["calls"])
            usec += float(s["usec"])
    cpu: dict[str, Any] = client.info("cpu")  # type: ignore[assignment]
    main = float(cpu.get("used_cpu_user_main_thread", 0)) + float(
        cpu.get("used_cpu_sys_main_thread", 0)
    )
    return RedisSnapshot(
        calls, usec, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), main
    )


class SteadyRedis:
    """Redis's counters over a run's steady part: from the first look at which the watched
    group has committed `warmup` messages (a workload of N open groups opens most of them
    in its first 2N messages, each a group's dearer first message), to the end. The
    messages of the first two commits after that look are not counted, though Redis may
    have done part of their work after it (a unit decides its next batch while the last
    commits): the figure can err high, never low."""

    def __init__(self, client: RedisClient, warmup: int) -> None:
        self.client = client
        self.warmup = warmup
        self.start: RedisSnapshot | None = None
        self.commits: list[int] = []  # committed totals seen from the start on
        self.used: RedisSnapshot | None = None
        self.messages = 0

    def look(self, committed: int) -> None:
        if self.start is None:
            if committed >= self.warmup:
                self.start = redis_snapshot(self.client)
                self.commits = [committed]
        elif committed > self.commits[-1] and len(self.commits) < 3:
            self.commits.append(committed)

    def end(self, committed: int) -> None:
        if self.start is not None and len(self.commits) == 3 and committed > self.commits[2]:
            self.used = redis_snapshot(self.client) - self.start
            self.messages = committed - self.commits[2]
