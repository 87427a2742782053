"""`spark_jobs.api` in a job of one's own, on a schema that is not the demo's: a plain
DataFrame of order lines (order_id, line_no, is_last, amount) and loose notes."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

import pytest
from pyspark.sql import functions as F

from router import contract
from router.config import RoutingSettings
from spark_jobs import api, groups
from spark_jobs.session import kafka_options
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until

pytestmark = pytest.mark.spark

ROUTING = RoutingSettings(ttl_by_type={"order-line": 60_000})
GROUP_HEADERS = {contract.SEQ, contract.FINAL, contract.TTL_MS, contract.DELIVERY}


def _lines(orders: int, seed: int = 7) -> list[tuple[str, int, bool, int]]:
    """Order lines in a scrambled order, plus ordinary notes (no order: line_no 0)."""
    rng = random.Random(seed)
    rows: list[tuple[str, int, bool, int]] = []
    for o in range(orders):
        n = rng.randint(1, 9)
        rows += [(f"O{o}", i, i == n - 1, rng.randint(1, 999)) for i in range(n)]
    rows += [(f"NOTE{i}", 0, False, 0) for i in range(5)]
    rng.shuffle(rows)
    return rows


def _frame(spark: Any, rows: list[tuple[str, int, bool, int]]) -> Any:
    df = spark.createDataFrame(rows, "order_id STRING, line_no INT, is_last BOOLEAN, amount INT")
    return df.repartition(4)  # scattered over tasks, as any upstream shuffle leaves it


def _router_rows(df: Any, **extra: Any) -> Any:
    is_order = F.col("order_id").startswith("O")
    return api.to_router_rows(
        df,
        group_id=F.when(is_order, F.concat(F.lit("order/"), "order_id")),
        sequence="line_no",
        final="is_last",
        payload=F.to_json(F.struct("order_id", "line_no", "amount")),
        key=F.col("order_id"),
        **extra,
    )


def _headers(row: Any) -> dict[str, bytes]:
    return {h.key: bytes(h.value) for h in row.headers}


def test_rows_carry_the_header_contract_and_one_task_writes_each_group_in_order(
    spark: Any,
) -> None:
    rows = _lines(30)
    queues = ("sq.a", "sq.b", "sq.c")
    out = (
        _router_rows(
            _frame(spark, rows),
            queues=queues,
            message_type=F.lit("order-line"),
            ttl_ms=60_000,
            delivery=F.lit("complete"),
            headers={"source": F.lit("erp")},
            partitions=3,
        )
        .withColumn("task", F.spark_partition_id())
        .withColumn("position", F.monotonically_increasing_id())  # increases within a task
        .collect()
    )
    assert len(out) == len(rows)
    tasks: dict[str, set[int]] = defaultdict(set)
    topics: dict[str, set[str]] = defaultdict(set)
    seqs: dict[str, list[int]] = defaultdict(list)
    for r in sorted(out, key=lambda r: r.position):
        headers = _headers(r)
        routing = contract.parse(list(headers.items()), ROUTING)
        assert headers["source"] == b"erp"
        assert routing.message_type == "order-line"
        body = json.loads(bytes(r.value))
        assert bytes(r.key).decode() == body["order_id"]
        if routing.guarantee_id is None:
            assert body["order_id"].startswith("NOTE")
            assert not GROUP_HEADERS & set(headers)
            continue
        assert routing.guarantee_id == f"order/{body['order_id']}"
        assert routing.seq == body["line_no"]
        assert routing.ttl_ms == 60_000
        assert routing.complete  # whole-group delivery, on every member
        tasks[routing.guarantee_id].add(r.task)
        topics[routing.guarantee_id].add(r.topic)
        seqs[routing.guarantee_id].append(routing.seq)
        if routing.final:
            assert routing.seq == max(x[1] for x in rows if f"order/{x[0]}" == routing.guarantee_id)
    assert len(seqs) == 30
    assert all(len(t) == 1 for t in tasks.values())  # one task writes the whole group
    assert all(len(t) == 1 and t <= set(queues) for t in topics.values())
    assert all(s == list(range(len(s))) for s in seqs.values())  # in sequence
    assert len({t for ts in tasks.values() for t in ts}) > 1  # and the work is spread


def _plan_counts(df: Any) -> tuple[int, int]:
    """Exchanges (shuffles) and sorts in `df`'s physical plan."""
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    return plan.count("Exchange"), plan.count("Sort [")


def test_rows_in_order_already_keep_their_tasks_and_order_with_no_shuffle(spark: Any) -> None:
    """`in_order=True` (what Spark's real-time mode needs): each group already in one
    partition in sequence stays so, with no exchange added; `keep` carries columns."""
    rows = _lines(20)
    ordered = (
        _frame(spark, rows).repartition(3, "order_id").sortWithinPartitions("order_id", "line_no")
    )
    before = ordered.withColumn("task", F.spark_partition_id())
    out = _router_rows(before, queues=("sq.a", "sq.b"), in_order=True, keep=("task", "amount"))
    assert _plan_counts(out) == _plan_counts(ordered) == (1, 1)  # no shuffle, no sort added
    got = (
        out.withColumn("now", F.spark_partition_id())
        .withColumn("position", F.monotonically_increasing_id())
        .collect()
    )
    assert len(got) == len(rows)
    seqs: dict[str, list[int]] = defaultdict(list)
    for r in sorted(got, key=lambda r: r.position):
        assert r.now == r.task  # each row in the task it came in
        body = json.loads(bytes(r.value))
        assert r.amount == body["amount"]
        routing = contract.parse(list(_headers(r).items()), ROUTING)
        if routing.guarantee_id is not None:
            assert routing.seq is not None
            seqs[routing.guarantee_id].append(routing.seq)
    assert len(seqs) == 20 and all(s == list(range(len(s))) for s in seqs.values())
    for bad in ({"partitions": 2}, {"segment_bytes": 16 * 1024}):
        with pytest.raises(ValueError, match="in_order"):
            _router_rows(ordered, in_order=True, **bad)


def test_router_headers_cannot_be_passed_as_headers_of_ones_own(spark: Any) -> None:
    with pytest.raises(ValueError, match="router's"):
        _router_rows(_frame(spark, _lines(1)), headers={contract.FINAL: F.lit("true")})


def test_written_with_to_router_rows_read_back_with_read_router_queues(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    queues = (new_topic("spark-api", 3), new_topic("spark-api", 3))
    rows = _lines(12)
    kafka = kafka_options(kafka_bootstrap)
    _router_rows(_frame(spark, rows), queues=queues).write.format("kafka").options(**kafka).save()

    # Batch: headers as written, every group on one partition, in sequence by offset.
    read = api.read_router_queues(spark, queues, streaming=False, **kafka).collect()
    assert len(read) == len(rows)
    where: dict[str, set[tuple[str, int]]] = defaultdict(set)
    seqs: dict[str, list[int]] = defaultdict(list)
    for r in sorted(read, key=lambda r: (r.queue, r.partition, r.offset)):
        body = json.loads(bytes(r.value))
        if r.guarantee_id is None:
            assert body["order_id"].startswith("NOTE") and r.seq is None and not r.final
            continue
        assert r.guarantee_id == f"order/{body['order_id']}"
        assert (r.seq, r.raw_seq) == (body["line_no"], str(body["line_no"]))
        where[r.guarantee_id].add((r.queue, r.partition))
        seqs[r.guarantee_id].append(r.seq)
        assert r.final == (r.seq == max(x[1] for x in rows if f"order/{x[0]}" == r.guarantee_id))
    assert len(seqs) == 12
    assert all(len(w) == 1 for w in where.values())
    assert all(s == list(range(len(s))) for s in seqs.values())

    # Streaming, with Kafka source options passed through (at most 7 offsets a batch),
    # into complete_groups: every group once, complete and in sequence.
    body = F.col("value").cast("string")
    record_id = F.concat_ws(
        "/", F.get_json_object(body, "$.order_id"), F.get_json_object(body, "$.line_no")
    )
    messages = api.read_router_queues(
        spark, queues, **kafka, maxOffsetsPerTrigger=7, groupIdPrefix=unique("api-reader")
    )
    name = unique("api_outcomes").replace("-", "_")
    query = (
        api.complete_groups(messages, record_id=record_id)
        .writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    expected_rows = len(seqs) + 5  # a row per complete group and per note
    try:
        wait_until(
            lambda: not query.isActive or spark.table(name).count() >= expected_rows,
            180,
            f"{expected_rows} outcomes",
        )
    finally:
        query.stop()
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(batches) == len(rows)
    # The limit is split over the 6 partitions, each share rounded up: at most 7 + 6.
    assert len(batches) >= len(rows) // 13 and max(batches) <= 13
    outcomes = spark.table(name).collect()
    assert {o.output for o in outcomes} == {groups.GROUP, groups.RECORD}
    complete = {o.guarantee_id: o for o in outcomes if o.output == groups.GROUP}
    assert sorted(complete) == sorted(seqs)
    for gid, o in complete.items():
        assert list(o.members_seq) == list(range(len(seqs[gid])))
        order = gid.removeprefix("order/")
        assert list(o.members_record_id) == [f"{order}/{i}" for i in o.members_seq]
    records = sorted(o.record_id for o in outcomes if o.output == groups.RECORD)
    assert records == [f"NOTE{i}/0" for i in range(5)]
