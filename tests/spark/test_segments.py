"""Segments (`router.contract.segments`' contract) in the Spark clients, on the real broker: what
`to_router_rows(segment_bytes=...)` writes is what the Python receiver reassembles, what
a Python client segments is what `complete_groups` reassembles, and a broken segmented
message is a visible violation with its reason, never data."""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import functions as F

from ops.harness.traffic.final_read import read_to_end
from router import contract
from router.config import KafkaSettings, RoutingSettings
from router.contract import segments
from router.receiver.reassembly import Reassembler
from router.receiver.received import Received
from spark_jobs import api, groups
from spark_jobs.session import kafka_options
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.spark_messages import Queues

pytestmark = pytest.mark.spark

SEGMENT = 1024


def _rows(rng: random.Random) -> list[tuple[str | None, int, bool, bytes]]:
    """Files of a non-demo schema: groups of members (some larger than a segment) and
    ordinary large and small payloads."""
    rows: list[tuple[str | None, int, bool, bytes]] = []
    for g in range(6):
        n = rng.randint(1, 4)
        for i in range(n):
            size = rng.choice([10, 900, 1024, 1025, 3000, 5000])
            rows.append((f"batch/{g}", i, i == n - 1, rng.randbytes(size)))
    for size in (5, 1024, 1025, 7000):
        rows.append((None, 0, False, rng.randbytes(size)))
    return rows


def _frame(spark: Any, rows: list[tuple[str | None, int, bool, bytes]]) -> Any:
    schema = "batch STRING, line INT, last BOOLEAN, body BINARY"
    return spark.createDataFrame(rows, schema).repartition(3)


def _received(m: Any) -> Received:
    headers = m.headers() or []
    routing = contract.parse(headers, RoutingSettings())
    return Received(
        m.topic(),
        m.partition(),
        m.offset(),
        m.key(),
        m.value(),
        headers,
        m.timestamp()[1],
        routing.guarantee_id,
        routing.final,
        routing.seq,
    )


def _stream(spark: Any, messages: Any, name: str, expected: int) -> list[Any]:
    query = (
        api.complete_groups(messages)
        .writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    try:
        wait_until(
            lambda: not query.isActive or spark.table(name).count() >= expected,
            180,
            f"{expected} outcomes",
        )
    finally:
        query.stop()
    assert query.exception() is None
    return list(spark.table(name).collect())


def test_spark_segments_are_the_contracts_both_ways(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    rows = _rows(random.Random(5))
    queue = new_topic("spark-seg", 2)
    kafka = kafka_options(kafka_bootstrap)
    out = api.to_router_rows(
        _frame(spark, rows),
        group_id="batch",
        sequence="line",
        final="last",
        payload="body",
        segment_bytes=SEGMENT,
    )
    out.write.format("kafka").options(**kafka).option("topic", queue).save()

    # Read as any consumer would: every record fits a segment, every segment's headers
    # are the contract's, and the Python receiver's reassembly gives the payloads back.
    read = read_to_end(
        KafkaSettings(bootstrap_servers=kafka_bootstrap),
        {f"{queue}[{p}]": TopicPartition(queue, p) for p in range(2)},
    )
    reassembler = Reassembler()
    seqs: dict[str, list[int]] = defaultdict(list)
    where: dict[str, set[int]] = defaultdict(set)
    for records in read.values():
        # Spark's tasks share a producer, so other records may lie between a message's
        # segments on the send queue (spark_jobs/README.md, "Segments"); the router hands a
        # group over together: reassemble each group's members together, in their order.
        together: dict[str | int, list[Received]] = defaultdict(list)
        for m in records:
            r = _received(m)
            assert len(m.value()) <= SEGMENT
            assert segments.problem(r.headers, r.guarantee_id, r.final) is None
            assert r.guarantee_id is not None or segments.read(r.headers) is None
            if r.guarantee_id is not None:
                seqs[r.guarantee_id].append(r.seq or 0)
                where[r.guarantee_id].add(m.partition())
            together[r.guarantee_id if r.guarantee_id is not None else r.offset].append(r)
        delivered = [r for members in together.values() for r in members]
        for at, r in enumerate(delivered):
            reassembler.add(dataclasses.replace(r, offset=at), 0.0)
    assert all(s == list(range(len(s))) for s in seqs.values())  # consecutive numbers
    assert all(len(w) == 1 for w in where.values())  # a group, segments too, on one lane
    got: dict[str | None, list[bytes]] = defaultdict(list)
    while (x := reassembler.pop()) is not None:
        assert x.value is not None
        got[x.guarantee_id].append(x.value)
    want: dict[str | None, list[bytes]] = defaultdict(list)
    for gid, _, _, body in sorted(rows, key=lambda r: (r[0] or "", r[1])):
        want[gid].append(body)
    assert {g: v for g, v in got.items() if g} == {g: v for g, v in want.items() if g}
    assert sorted(got[None]) == sorted(want[None])  # large ordinary messages: whole
    assert any(len(s) > len([r for r in rows if r[0] == g]) for g, s in seqs.items())

    # ... and complete_groups, reading the same queue: one GROUP row per group with its
    # members whole, one RECORD per ordinary message, reassembled.
    messages = api.read_router_queues(spark, [queue], **kafka, maxOffsetsPerTrigger=7)
    outcomes = _stream(spark, messages, unique("seg_out").replace("-", "_"), 6 + 4)
    assert {o.output for o in outcomes} == {groups.GROUP, groups.RECORD}
    for o in outcomes:
        if o.output == groups.GROUP:
            assert [bytes(v) for v in o.members_value] == want[o.guarantee_id]
            assert [len(p) for p in o.members_parts] == [
                segments.count(len(b), SEGMENT) for b in want[o.guarantee_id]
            ]
    records = [o for o in outcomes if o.output == groups.RECORD]
    assert all(o.guarantee_id is None for o in records)
    assert sorted(bytes(o.value) for o in records) == sorted(want[None])
    assert sorted(len(o.parts or [o.offset]) for o in records) == [1, 1, 2, 7]


def test_a_python_clients_segments_and_broken_ones_in_complete_groups(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    queue = new_topic("spark-seg")
    w = Queues(kafka_bootstrap)
    body = random.Random(3).randbytes(5000)  # five segments
    w.produce(w.segmented(queue, body, SEGMENT, None, gid="g/ok", set_id="s-ok"))
    w.produce(w.segmented(queue, body, SEGMENT, None, set_id="s-own"))  # ordinary
    broken = w.segmented(queue, body, SEGMENT, None, gid="g/sum", set_id="s-sum")
    topic, headers, value = broken[2]
    broken[2] = (topic, headers, b"?" + value[1:])
    w.produce(broken)
    gap = w.segmented(queue, body, SEGMENT, None, gid="g/gap", set_id="s-gap")
    # Segment 1 is lost upstream but the sequence runs on: the segment index shows it.
    w.produce([gap[0], *[(t, _renumber(h, -1), v) for t, h, v in gap[2:]]])
    # Malformed segment headers: a violation at once (bad-segment), and the rest of its
    # group then breaks (its seq 0 never entered the group).
    bad = w.segmented(queue, body[:2000], SEGMENT, None, gid="g/bad", set_id="s-bad")
    t, h, v = bad[0]
    bad[0] = (t, [(k, b"x" if k == contract.SEGMENT_INDEX else v2) for k, v2 in h], v)
    w.produce(bad)
    w.flush()

    messages = api.read_router_queues(spark, [queue], **kafka_options(kafka_bootstrap))
    outcomes = _stream(spark, messages, unique("seg_py").replace("-", "_"), 2 + 5 + 4 + 2)
    by_group: dict[str | None, list[Any]] = defaultdict(list)
    for o in outcomes:
        by_group[o.guarantee_id].append(o)
    (ok,) = by_group["g/ok"]
    assert ok.output == groups.GROUP and [bytes(v) for v in ok.members_value] == [body]
    assert list(ok.members_record_id) == ["s-ok"]
    (own,) = by_group[None]
    assert own.output == groups.RECORD and bytes(own.value) == body and len(own.parts) == 5
    assert hashlib.sha256(bytes(own.value)).hexdigest() == hashlib.sha256(body).hexdigest()
    for gid, reason, n in (
        ("g/sum", "checksum-mismatch", 5),
        ("g/gap", "segment-missing", 4),
        ("g/bad", "bad-segment", 2),
    ):
        rows = by_group[gid]
        assert {o.output for o in rows} == {groups.VIOLATION}, gid
        assert len(rows) == n, gid  # every record accounted for, none handed over as data
        assert any(o.reason.startswith(reason) for o in rows), [o.reason for o in rows]


def _renumber(headers: list[tuple[str, bytes]], by: int) -> list[tuple[str, bytes]]:
    return [(k, str(int(v) + by).encode() if k == contract.SEQ else v) for k, v in headers]


CASES: list[list[tuple[str, bytes]]] = [
    [],
    [(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"0")],
    [(contract.SEGMENT_INDEX, b"0")],
    [(contract.SEGMENT_ID, b""), (contract.SEGMENT_INDEX, b"0")],
    [(contract.SEGMENT_ID, b"s" * 129), (contract.SEGMENT_INDEX, b"0")],
    [(contract.SEGMENT_ID, b"\xff"), (contract.SEGMENT_INDEX, b"0")],
    [(contract.SEGMENT_ID, b"s")],
    [(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"-1")],
    [(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"1000000")],
    [(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"0"), (contract.SEGMENT_INDEX, b"1")],
    [(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"0"), (contract.SEGMENT_LAST, b"no")],
    [(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"0"), (contract.SEGMENT_BYTES, b"1")],
    [(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"2"), (contract.SEGMENT_LAST, b"1")],
    [
        (contract.SEGMENT_ID, b"s"),
        (contract.SEGMENT_INDEX, b"2"),
        (contract.SEGMENT_LAST, b"true"),
        (contract.SEGMENT_BYTES, b"12"),
        (contract.SEGMENT_SHA256, b"ab" * 32),
    ],
    [
        (contract.SEGMENT_ID, b"s"),
        (contract.SEGMENT_INDEX, b"2"),
        (contract.SEGMENT_LAST, b"TRUE"),
        (contract.SEGMENT_BYTES, b"x"),
        (contract.SEGMENT_SHA256, b"ab" * 32),
    ],
    [
        (contract.SEGMENT_ID, b"s"),
        (contract.SEGMENT_INDEX, b"2"),
        (contract.SEGMENT_LAST, b"true"),
        (contract.SEGMENT_BYTES, b"12"),
        (contract.SEGMENT_SHA256, b"zz" * 32),
    ],
]


def test_segment_headers_are_checked_as_the_units_check_them(spark: Any) -> None:
    """`reading.segment_columns` against `router.contract.segments.problem`, for each case as a
    member of a group, final or not, and as an ordinary message's group of its own."""
    headers_type = "ARRAY<STRUCT<key: STRING, value: BINARY>>"
    rows = []
    for i, case in enumerate(CASES):
        for gid, final in ((None, False), ("g", False), ("g", True), ("s", True), ("s", False)):
            routing = contract.headers_for(gid, final=final)
            rows.append((i, gid, final, [*routing, *case]))
    df = spark.createDataFrame(
        [(i, h) for i, _, _, h in rows], f"case INT, headers {headers_type}"
    ).select(
        "case",
        F.lit(None).cast("string").alias("topic"),
        F.lit(0).alias("partition"),
        F.lit(0).cast("bigint").alias("offset"),
        F.current_timestamp().alias("timestamp"),
        F.lit(None).cast("binary").alias("key"),
        F.lit(None).cast("binary").alias("value"),
        "headers",
    )
    got = [r.segment_problem for r in api.with_routing(df).collect()]
    for (i, gid, final, headers), problem in zip(rows, got, strict=True):
        want = segments.problem(headers, gid, final)
        assert (problem is None) == (want is None), (i, gid, final, problem, want)
        if want is not None:
            assert problem.startswith("bad-segment: ")


def test_segment_bytes_is_checked_and_needs_a_batch_frame(spark: Any) -> None:
    df = _frame(spark, _rows(random.Random(1)))
    args: dict[str, Any] = {"group_id": "batch", "sequence": "line", "final": "last"}
    with pytest.raises(ValueError, match="below"):
        api.to_router_rows(df, payload="body", segment_bytes=100, **args)
    with pytest.raises(ValueError, match="exceeds"):
        api.to_router_rows(df, payload="body", segment_bytes=1 << 20, **args)
    with pytest.raises(ValueError, match="router's"):
        api.to_router_rows(df, payload="body", headers={contract.SEGMENT_ID: F.lit("x")}, **args)
    stream = (
        spark.readStream.format("rate")
        .load()
        .select(
            F.lit("g").alias("batch"),
            F.col("value").alias("line"),
            F.lit(False).alias("last"),
            F.col("value").cast("string").cast("binary").alias("body"),
        )
    )
    with pytest.raises(ValueError, match="foreachBatch"):
        api.to_router_rows(stream, payload="body", segment_bytes=SEGMENT, **args)
    # Without segment_bytes a large payload goes whole (the router judges its size).
    whole = api.to_router_rows(df.limit(3), payload="body", **args)
    assert all(not any(h.key in segments.HEADERS for h in r.headers) for r in whole.collect())
