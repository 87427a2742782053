"""Where a unit's time goes per transaction (issue 31): the `time_*_us` counters each unit
and Python relay publishes (`router.metrics.registry`), and the same sums the Java relay
prints when it stops (`ops/java/Relay.java`: "relay timings ..."), per committed batch.

The Python units overlap a batch's commit (on the commit thread) with deciding the next
one, so their run-loop phases and their commit-thread phases each add up to at most the
stage's time, not together; the Java relay does one thing after the other."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ops.harness.console import Column, markdown_table

# (counter, label); the run loop's first, then the commit thread's
PHASES = (
    ("time_poll_us", "poll"),
    ("time_decide_us", "decide"),
    ("time_emit_us", "emit"),
    ("time_produce_us", "produce"),
    ("time_commit_wait_us", "wait for commit"),
    ("time_offsets_us", "offsets"),
    ("time_append_us", "append"),
    ("time_commit_us", "commit"),
)
_JAVA = re.compile(r"relay timings (.*)$", re.MULTILINE)
_JAVA_COUNT = re.compile(r"stopped after forwarding (\d+) records")


def from_counters(counters: Mapping[str, int]) -> tuple[int, dict[str, int]]:
    """(batches committed, phase -> µs, and "messages": those consumed) from a role's
    summed counters."""
    out = {k: counters[k] for k, _ in PHASES if k in counters}
    out["messages"] = counters.get("messages_in", 0)
    return counters.get("batches", 0), out


def from_java_logs(texts: Iterable[str]) -> tuple[int, dict[str, int]]:
    """The same, summed over the Java relays' stop lines."""
    batches, out = 0, {"messages": 0}
    for text in texts:
        for line in _JAVA.findall(text):
            fields = dict(kv.split("=", 1) for kv in line.split())
            batches += int(fields.pop("batches", "0"))
            for k, v in fields.items():
                out[k] = out.get(k, 0) + int(v)
        out["messages"] += sum(int(n) for n in _JAVA_COUNT.findall(text))
    return batches, out


COLUMNS = (
    Column("stage"),
    Column("processes", "right"),
    Column("msgs/txn", "right"),
    *(Column(f"{label} (ms/txn)", "right") for _, label in PHASES),
)


def rows(stages: Iterable[tuple[str, int, int, Mapping[str, int]]]) -> list[list[str]]:
    """One row per (stage, processes, batches, phase -> µs) with batches."""
    out = []
    for stage, processes, batches, phases in stages:
        if not batches or len(phases) < 2:
            continue
        out.append(
            [
                stage,
                str(processes),
                f"{phases.get('messages', 0) / batches:,.0f}",
                *(f"{phases[k] / batches / 1000:.2f}" if k in phases else "" for k, _ in PHASES),
            ]
        )
    return out


def table(stages: Iterable[tuple[str, int, int, Mapping[str, int]]]) -> str:
    return "\n".join(markdown_table(COLUMNS, rows(stages)))
