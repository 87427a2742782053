"""Where a group's latency goes in the Spark benchmark: each hop of its last member.

A group's completion latency (`bench_stats.latencies_ms`) runs from its last member's
creation to the commit of the receiver's micro-batch that emitted it. Its last member (the
final) leaves a time on every topic it crosses, so the latency splits into four hops:

* sender: from `created-ms` (the sender's micro-batch time) to the send queue's record
  time (CreateTime: when Spark's Kafka producer took it);
* send unit: to the transfer topic's LogAppendTime (the send unit's append; a parked
  final's after its drain from the waiting room);
* receive unit: to the receive queue's LogAppendTime;
* receiver: to the commit of the receiver's micro-batch that wrote the group.

An append is before its transaction's commit, so a hop's commit wait is counted in the next
hop. The times come from the topics themselves, read `read_committed` after the run (the
benchmark's pipeline sets LogAppendTime on the transfer topic and the receive queues), and
from the receiver's progress: none from the router's own counters. `hop_figures` is pure;
`final_times` reads the topics with Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyspark.sql import functions as F

from ops.harness.spark.bench_stats import latency_summary
from spark_jobs import domain
from spark_jobs.reading import header_value, read_router_queues

HOPS = ("sender", "send unit", "receive unit", "receiver")


def hop_figures(
    finals: Iterable[Sequence[int]], since_ms: float | None = None, until_ms: float | None = None
) -> dict[str, dict[str, float]]:
    """(created, sent, transferred, received, committed) ms per group -> each hop's and
    the whole's `latency_summary` (groups, p50, p99, max), for groups created in
    [since_ms, until_ms]."""
    spans: dict[str, list[float]] = {h: [] for h in (*HOPS, "whole")}
    for times in finals:
        if len(times) != len(HOPS) + 1:
            raise ValueError(f"a group needs {len(HOPS) + 1} times, not {len(times)}: {times}")
        created = times[0]
        if since_ms is not None and created < since_ms:
            continue
        if until_ms is not None and created > until_ms:
            continue
        for hop, start, end in zip(HOPS, times, times[1:], strict=False):
            spans[hop].append(end - start)
        spans["whole"].append(times[-1] - created)
    return {hop: latency_summary(vals) for hop, vals in spans.items()}


def join_times(
    created: Mapping[str, int],
    sent: Mapping[str, int],
    transferred: Mapping[str, int],
    received: Mapping[str, int],
    committed: Mapping[str, int],
) -> tuple[list[tuple[int, int, int, int, int]], int]:
    """Per guarantee ID, its final's times on each topic and its group's commit -> the
    groups that have all five, and how many of the committed groups lack one."""
    rows = []
    for gid, done in committed.items():
        try:
            rows.append((created[gid], sent[gid], transferred[gid], received[gid], done))
        except KeyError:
            continue
    return rows, len(committed) - len(rows)


def final_times(
    spark: Any, topics: Sequence[str], kafka: Mapping[str, str]
) -> dict[str, tuple[int, int | None]]:
    """Guarantee ID -> its final's record time on `topics` (the earliest, if written
    twice) and its `created-ms` header (None if absent), read once to the topics' end
    offsets, `read_committed`."""
    df = read_router_queues(spark, topics, streaming=False, **kafka)
    rows = (
        df.where(F.col("final") & F.col("guarantee_id").isNotNull())
        .groupBy("guarantee_id")
        .agg(
            F.min(F.unix_millis("timestamp")).alias("t"),
            F.min(header_value(domain.CREATED_HEADER).try_cast("bigint")).alias("created"),
        )
        .collect()
    )
    return {r.guarantee_id: (int(r.t), None if r.created is None else int(r.created)) for r in rows}
