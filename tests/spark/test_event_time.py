"""The receiver's verdicts do not depend on how long it was down: a receiver stopped
mid-stream for longer than the group timeout and restarted with a bounded
maxOffsetsPerTrigger reports exactly what an uninterrupted receiver reports."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import domain, outputs, receiver
from spark_jobs.session import kafka_options
from spark_jobs.streaming import StreamJob
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.spark_messages import Queues, order_line, stock

pytestmark = pytest.mark.spark

GROUP_TIMEOUT_MS = 3_000
# Event time is the payloads' creation time, chosen here; the wall clock plays no part.
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
STEP = dt.timedelta(milliseconds=20)

Event = tuple[int, str, bytes, str | None, int | None, bool]  # queue, id, value, gid, seq, final


def _events() -> list[Event]:
    """Orders of 2..8 lines, twelve open at a time, written line by line in turn on two
    queues, a stock update after every fourth line, and LONG, one line in ten from start
    to end: at any instant many groups are open, so the micro-batches after a restart
    leave some of them without a message. STUCK never sends its final, GAP skips line 1,
    DUP's line 1 is sent twice."""
    sizes = {f"O{i:02d}": 2 + (i * 5) % 7 for i in range(30)}
    sizes.update({"STUCK": 4, "GAP": 4, "DUP": 3})
    waiting = sorted(sizes)
    queue_of = {n: i % 2 for i, n in enumerate([*waiting, "LONG"])}
    sizes["LONG"] = 20
    sent = dict.fromkeys(sizes, 0)
    open_: list[str] = []
    events: list[Event] = []

    def emit(n: str) -> None:
        line, count = sent[n], sizes[n]
        sent[n] += 1
        if (n, line) in {("STUCK", 3), ("GAP", 1)}:
            return
        created = T0 + STEP * len(events)
        value, final = order_line(n, line, count, created), line == count - 1
        for _ in range(2 if (n, line) == ("DUP", 1) else 1):
            events.append((queue_of[n], f"{n}/{line}", value, f"po/{n}", line, final))
        if len(events) % 4 == 0:
            update = f"SU-{len(events)}"
            events.append((len(events) % 2, update, stock(update, created), None, None, False))

    turn = 0
    while waiting or open_:
        while waiting and len(open_) < 12:
            open_.append(waiting.pop(0))
        if turn % 10 == 0 and sent["LONG"] < sizes["LONG"] - 1:
            emit("LONG")
        n = open_[turn % len(open_)]
        emit(n)
        if sent[n] == sizes[n]:
            open_.remove(n)
        turn += 1
    while sent["LONG"] < sizes["LONG"]:
        emit("LONG")  # its last lines and its final, last of all
    return events


def _send(w: Queues, queues: tuple[str, str], events: list[Event]) -> None:
    for q, _, value, gid, seq, final in events:
        schema = domain.ORDER_LINE if gid else domain.STOCK
        w.send(queues[q], value, schema, gid, seq, final)
    w.flush()


def _start(spark: Any, config: receiver.ReceiverConfig) -> StreamJob:
    return receiver.start(spark, replace(config, trigger_seconds=0.5), unique("receiver"))


def _input_rows(job: StreamJob) -> int:
    return sum(p["numInputRows"] for p in job.query.recentProgress)


def _verdicts(spark: Any, output: Path) -> Counter[tuple[Any, ...]]:
    """Every row of every output, by what it says (not when it was written)."""
    v: Counter[tuple[Any, ...]] = Counter()

    def rows(name: str) -> list[Any]:
        return outputs.read(spark, str(output), name).collect()

    for g in rows("groups"):
        v["group", g.guarantee_id, g.queue, tuple(m.record_id for m in g.members)] += 1
    for r in rows("records"):
        v["record", r.record_id, r.queue, r.offset] += 1
    for d in rows("duplicates"):
        v["duplicate", d.record_id, d.queue, d.offset, d.reason] += 1
    for x in rows("violations"):
        v["violation", x.guarantee_id, x.record_id, x.queue, x.offset, x.reason] += 1
    return v


def test_a_receiver_down_longer_than_the_group_timeout_gives_the_same_verdicts(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    queues = (new_topic("spark-evt"), new_topic("spark-evt"))
    events = _events()
    half = len(events) // 2
    # After everything else: a stock update a minute later in event time, which moves the
    # watermark past STUCK's timeout.
    tick_at = T0 + STEP * len(events) + dt.timedelta(minutes=1)
    tick: list[Event] = [(0, "TICK", stock("TICK", tick_at), None, None, False)]
    w = Queues(kafka_bootstrap)

    def config(name: str, **extra: Any) -> receiver.ReceiverConfig:
        return receiver.ReceiverConfig(
            queues,
            kafka_options(kafka_bootstrap),
            str(tmp_path / name / "checkpoint"),
            str(tmp_path / name / "output"),
            group_timeout_ms=GROUP_TIMEOUT_MS,
            lateness_ms=1_000,
            **extra,
        )

    # Interrupted: the first half, a stop mid-stream, an outage longer than the group
    # timeout while the second half arrives, and a restart that catches up in small
    # micro-batches (at most 10 offsets, over both queues).
    _send(w, queues, events[:half])
    job = _start(spark, config("interrupted"))
    try:
        wait_until(lambda: _input_rows(job) >= half, 120, "the first half read")
    finally:
        job.stop()
    stopped = time.monotonic()
    assert job.progress.terminated.wait(30)
    accounted = job.metric("messages")
    _send(w, queues, events[half:])
    # The outage is the scenario here, not a synchronisation: twice the group timeout.
    wait_until(lambda: time.monotonic() - stopped > 2 * GROUP_TIMEOUT_MS / 1000, 30, "the outage")
    job = _start(spark, config("interrupted", max_offsets_per_trigger=10))
    try:
        wait_until(lambda: _input_rows(job) >= len(events) - half, 120, "the second half read")
        _send(w, queues, tick)
        wait_until(
            lambda: accounted + job.metric("messages") >= w.count, 120, "every message accounted"
        )
    finally:
        job.stop()
    assert job.failure() is None
    interrupted = _verdicts(spark, tmp_path / "interrupted" / "output")

    # Uninterrupted: everything in one go.
    job = _start(spark, config("uninterrupted"))
    try:
        wait_until(lambda: job.metric("messages") >= w.count, 120, "every message accounted")
    finally:
        job.stop()
    assert job.failure() is None
    uninterrupted = _verdicts(spark, tmp_path / "uninterrupted" / "output")

    assert interrupted == uninterrupted
    kinds = Counter(v[0] for v in uninterrupted.elements())
    orders = {e[3] for e in events if e[3]}
    assert kinds["group"] == len(orders) - 2  # all but STUCK and GAP
    assert kinds["duplicate"] == 1
    assert kinds["record"] == sum(1 for e in events if e[3] is None) + 1
    reasons = {v[2]: v[5] for v in uninterrupted if v[0] == "violation"}
    assert sorted(reasons) == ["GAP/0", "GAP/2", "GAP/3", "STUCK/0", "STUCK/1", "STUCK/2"]
    assert all(reasons[f"STUCK/{i}"].startswith("incomplete") for i in range(3))
    assert reasons["GAP/2"].startswith("order: seq 2 arrived where seq 1 was due")
