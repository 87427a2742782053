"""Delivery QoS headers in the Spark clients (issue 11): lifetime and multicast written by
`to_router_rows` as the router reads them, and `complete_groups` on the real broker
turning an expired message into an `expired` outcome (skip / expire-group in a group)
and counting each multicast copy once on its own queue."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F

from router import contract
from router.contract import BadInput, lifetime, multicast, priority
from spark_jobs import api, groups
from spark_jobs.session import kafka_options
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until

pytestmark = pytest.mark.spark

QUEUES = ("shop.recv.0", "shop.recv.1", "shop.recv.2")


def _headers(row: Any) -> list[tuple[str, bytes]]:
    return [(h.key, bytes(h.value)) for h in row.headers]


def test_lifetime_and_multicast_headers_are_the_routers(spark: Any) -> None:
    now_ms = int(time.time() * 1000)
    df = spark.createDataFrame(
        [("g/1", 0, False, "a", 10_000, True), (None, 0, False, "b", None, False)],
        "gid STRING, seq INT, last BOOLEAN, body STRING, life INT, everywhere BOOLEAN",
    ).withColumn("deadline", F.timestamp_millis(F.lit(now_ms + 60_000)))
    rows = api.to_router_rows(
        df,
        group_id="gid",
        sequence="seq",
        final="last",
        payload="body",
        expires_at="deadline",
        lifetime_ms="life",
        on_expiry=F.lit("expire-group"),
    ).collect()
    by_body = {bytes(r.value): _headers(r) for r in rows}
    read = lifetime.read(
        by_body[b"a"], now_ms, min_lifetime_ms=1, max_lifetime_ms=10**9, default_on_expiry="skip"
    )
    assert read is not None and read.on_expiry == "expire-group"
    assert read.expires_ms == min(now_ms + 60_000, now_ms + 10_000)  # the earlier wins
    only_at = lifetime.read(
        by_body[b"b"], None, min_lifetime_ms=1, max_lifetime_ms=10**9, default_on_expiry="skip"
    )
    assert only_at is not None and only_at.expires_ms == now_ms + 60_000
    assert dict(by_body[b"a"])[lifetime.EXPIRES_AT] == str(now_ms + 60_000).encode()

    ordinary = contract.Routing(None, False, 1)
    for to, want in (
        (True, QUEUES),
        (["shop.recv.2", "shop.recv.0"], ("shop.recv.0", "shop.recv.2")),
        ("everywhere", QUEUES),  # a boolean column
    ):
        out = api.to_router_rows(
            df.where("gid IS NULL"),
            group_id="gid",
            sequence="seq",
            final="last",
            payload="body",
            multicast_to=to,
        ).collect()
        got = multicast.read(_headers(out[0]), QUEUES, ordinary)
        assert got == (None if to == "everywhere" else want), to  # b: everywhere false
    # A grouped row marked multicast reaches the router as it is: dead-lettered there.
    grouped = api.to_router_rows(
        df.where("gid IS NOT NULL"),
        group_id="gid",
        sequence="seq",
        final="last",
        payload="body",
        multicast_to=True,
    ).first()
    with pytest.raises(BadInput, match="cannot be multicast"):
        multicast.read(_headers(grouped), QUEUES, contract.Routing("g/1", False, 1))
    # Priority: the header engineer A's units read (router.contract.priority), 0..9.
    ranked = api.to_router_rows(
        df, group_id="gid", sequence="seq", final="last", payload="body", priority=7
    ).collect()
    assert {priority.read(_headers(r)) for r in ranked} == {7}
    with pytest.raises(ValueError, match="priority"):
        api.to_router_rows(
            df, group_id="gid", sequence="seq", final="last", payload="body", priority=10
        )
    with pytest.raises(ValueError, match="multicast queues"):
        api.to_router_rows(
            df, group_id="gid", sequence="seq", final="last", payload="body", multicast_to=[""]
        )


def test_expired_messages_and_multicast_copies_in_complete_groups(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    q1, q2 = new_topic("spark-qos"), new_topic("spark-qos")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    past, future = str(int(time.time() * 1000) - 60_000).encode(), b"9999999999999"
    sent = 0

    def send(topic: str, body: bytes, headers: list[tuple[str, bytes]], gid: str | None = None,
             seq: int | None = None, final: bool = False) -> None:  # fmt: skip
        nonlocal sent
        routing = contract.headers_for(gid, seq=seq, final=final)
        producer.produce(topic, body, key=gid, headers=[*routing, *headers])
        sent += 1

    send(q1, b"stale", [(lifetime.EXPIRES_AT, past)])
    send(q1, b"stamped", [(lifetime.ROUTER_EXPIRES_AT, past)])  # as the send unit stamps it
    send(q1, b"fresh", [(lifetime.EXPIRES_AT, future)])
    send(q1, b"relative", [(lifetime.LIFETIME_MS, b"1")])  # 1 ms after its timestamp
    send(q1, b"bad", [(lifetime.EXPIRES_AT, b"soon")])
    for i in range(3):  # skip (the default): the group goes on without seq 1
        life = [(lifetime.EXPIRES_AT, past)] if i == 1 else []
        send(q2, f"skip-{i}".encode(), life, "g/skip", i, i == 2)
    for i in range(3):  # expire-group: the group ends at seq 1
        life = (
            [(lifetime.EXPIRES_AT, past), (lifetime.ON_EXPIRY, b"expire-group")] if i == 1 else []
        )
        send(q2, f"stop-{i}".encode(), life, "g/stop", i, i == 2)
    copy = multicast.headers()
    send(q1, b"price list", copy)
    send(q2, b"price list", copy)
    send(q2, b"price list", copy)  # a second copy on the same queue: a duplicate
    send(q1, b"note", [])
    send(q2, b"note", [])  # point-to-point: the same message on another queue, a duplicate
    assert producer.flush(30) == 0

    messages = api.read_router_queues(spark, [q1, q2], **kafka_options(kafka_bootstrap))
    name = unique("qos").replace("-", "_")
    query = (
        api.complete_groups(messages)
        .writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    # g/skip's two delivered members are one GROUP row; the two ordinary copies (the price
    # list's second on q2, the note's on q2) are dropped by Spark and counted.
    expected_rows = sent - 1 - 2
    try:
        wait_until(
            lambda: not query.isActive or spark.table(name).count() >= expected_rows,
            180,
            f"{expected_rows} outcomes",
        )
    finally:
        query.stop()
    assert query.exception() is None
    dropped = sum(
        int(op.get("customMetrics", {}).get("numDroppedDuplicateRows", 0))
        for p in query.recentProgress
        for op in p["stateOperators"]
    )
    assert dropped == 2
    outcomes = spark.table(name).collect()
    assert len(outcomes) == expected_rows
    by_value: dict[bytes, list[Any]] = defaultdict(list)
    for o in outcomes:
        if o.value is not None:
            by_value[bytes(o.value)].append(o)
    for body in (b"stale", b"stamped", b"relative"):
        (o,) = by_value[body]
        assert o.output == groups.EXPIRED and o.reason.startswith("expired: lifetime ended"), body
    assert [o.output for o in by_value[b"fresh"]] == [groups.RECORD]
    (bad,) = by_value[b"bad"]
    assert bad.output == groups.VIOLATION and bad.reason.startswith("bad-lifetime")

    (skip,) = [o for o in outcomes if o.guarantee_id == "g/skip" and o.output == groups.GROUP]
    assert list(skip.members_seq) == [0, 2]  # the gap shows where the expired member was
    assert [o.output for o in by_value[b"skip-1"]] == [groups.EXPIRED]
    stop = sorted((o.seq, o.output) for o in outcomes if o.guarantee_id == "g/stop")
    assert stop == [(0, groups.EXPIRED), (1, groups.EXPIRED), (2, groups.EXPIRED)]

    price = sorted((o.queue, o.output, bool(o.multicast)) for o in by_value[b"price list"])
    assert price == sorted([(q1, groups.RECORD, True), (q2, groups.RECORD, True)])  # a queue each
    assert [o.output for o in by_value[b"note"]] == [groups.RECORD]
