"""The real-time sender (`spark_jobs.realtime`, Spark's real-time mode): business records
on an upstream Kafka topic become groups on the send queues record by record, refused
records go to the rejects topic with their reason, and a stop and a restart from the
checkpoint lose nothing (real Kafka, no router: the topics are read back directly)."""

from __future__ import annotations

import base64
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from router import contract
from router.contract import schemas
from spark_jobs import domain, realtime, sender, workload
from spark_jobs.session import kafka_options
from spark_jobs.streaming import StreamJob
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MAX_RECORD = 8192  # a record whose messages could be larger is refused (no segments here)
T0 = 1_700_000_000_000  # upstream record timestamps: T0 + the record's number


class Topics:
    """Everything on some topics so far, read_committed, with each record's headers."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("rt-check"),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        meta = self.consumer.list_topics(timeout=10).topics
        self.consumer.assign([TopicPartition(t, p, 0) for t in topics for p in meta[t].partitions])
        self.got: list[Any] = []

    def count(self) -> int:
        for m in self.consumer.consume(500, 0.2):
            assert m.error() is None, m.error()
            self.got.append(m)
        return len(self.got)

    def close(self) -> None:
        self.consumer.close()


def _produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for number, value in values:
        producer.produce(topic, value, timestamp=T0 + number)
    assert producer.flush(30) == 0


def test_records_go_out_one_by_one_in_order_and_refused_ones_with_their_reason(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    upstream = new_topic("rt-up", 1)
    queues = (new_topic("rt-send", 3), new_topic("rt-send", 3))
    rejects = new_topic("rt-rejects", 1)
    run = unique("rt")
    good = workload.records(
        workload.BusinessWorkload(run, orders=30, documents=4, updates=40, max_document_bytes=2000)
    )
    random.Random(3).shuffle(good)
    big = {
        "type": "document",
        "document_id": f"{run}-big",
        "name": "big.pdf",
        "content_base64": base64.b64encode(random.Random(5).randbytes(7000)).decode(),
    }
    wide_line = {  # one line too large: the whole order is refused, never a gap in it
        "type": "purchase_order",
        "order_id": f"{run}-wide",
        "customer_id": "C-1",
        "lines": [
            {"sku": "A", "quantity": 1, "unit_price_cents": 1},
            {"sku": "B" * 9000, "quantity": 1, "unit_price_cents": 1},
        ],
    }
    two = json.dumps({"type": "stock_update", "update_id": f"{run}-u1", "sku": "A",
                      "warehouse": "W", "delta": 1})  # fmt: skip
    refused: dict[bytes, str] = {
        b"{not json": "malformed JSON line",
        json.dumps(
            {"type": "purchase_order", "order_id": f"{run}-x"}
        ).encode(): "a purchase order needs",
        json.dumps({"type": "invoice"}).encode(): "unknown record type",
        json.dumps(big).encode(): f"more than {MAX_RECORD}",
        json.dumps(wide_line).encode(): f"more than {MAX_RECORD}",
        (two + "\n" + two.replace("-u1", "-u2")).encode(): "more than one JSON value",
        two.replace("-u1", "-u3\udcff").encode("utf-8", "surrogateescape"): "not UTF-8",
    }
    half = len(good) // 2
    numbered = list(enumerate([json.dumps(r).encode() for r in good]))
    bad_lines = [(len(good) + i, value) for i, value in enumerate(refused)]
    config = realtime.RealTimeConfig(
        queues,
        rejects,
        kafka_options(kafka_bootstrap),
        str(tmp_path / "checkpoint"),
        checkpoint_seconds=5.0,
        max_record_bytes=MAX_RECORD,
    )

    def start() -> StreamJob:
        records = realtime.read_upstream(spark, upstream, config.kafka)
        return sender.start_realtime(spark, records, config, unique("rt-sender"))

    def expected(items: list[dict[str, Any]]) -> list[domain.Expected]:
        return [m for r in items for m in domain.expected_messages(r)]

    sent = Topics(kafka_bootstrap, list(queues))
    refusals = Topics(kafka_bootstrap, [rejects])
    try:
        job = start()
        _produce(kafka_bootstrap, upstream, numbered[:half] + bad_lines)
        first = len(expected(good[:half]))
        wait_until(lambda: sent.count() >= first, 90, f"{first} messages on the send queues")
        wait_until(
            lambda: refusals.count() >= len(refused),
            30,
            "the refused records",
            report=lambda: f"{[_reason(m) for m in refusals.got]} {job.failure()}",
        )
        assert job.active, job.failure()
        job.stop()
        assert job.failure() is None

        _produce(kafka_bootstrap, upstream, numbered[half:])  # while the sender is down
        job = start()
        everything = {m.record_id for m in expected(good)}
        wait_until(
            lambda: sent.count() and everything <= _ids(sent.got),
            90,
            "every message after the restart",
        )
        job.stop()
        assert job.failure() is None
        sent.count()
        refusals.count()
    finally:
        sent.close()
        refusals.close()

    # Every message, nothing else; those of records produced after the stop exactly once
    # (a restart writes again what was sent after the last checkpoint: at least once).
    ids = [_payload(m)["record_id"] for m in sent.got]
    assert set(ids) == everything
    later = [m.record_id for m in expected(good[half:])]
    assert all(ids.count(i) == 1 for i in later)
    number_of = {m.record_id: n for n, r in enumerate(good) for m in domain.expected_messages(r)}
    # Each group on one partition, in sequence (a copy repeats the group from seq 0),
    # final on its last member; dated by its upstream record.
    runs: dict[str, list[list[int]]] = defaultdict(list)
    where: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for m in sorted(sent.got, key=lambda m: (m.topic(), m.partition(), m.offset())):
        headers = dict(m.headers())
        payload = _payload(m)
        assert int(headers[domain.CREATED_HEADER]) == T0 + number_of[payload["record_id"]]
        gid = headers.get(contract.GUARANTEE_ID)
        if gid is None:
            continue
        seq = int(headers[contract.SEQ])
        where[gid.decode()].add((m.topic(), m.partition()))
        if seq == 0:
            runs[gid.decode()].append([])
        runs[gid.decode()][-1].append(seq)
        assert (contract.FINAL in headers) == (seq == payload["line_count"] - 1)
    assert len(runs) == 30
    assert all(len(w) == 1 for w in where.values())
    assert all(r == list(range(len(r))) for rs in runs.values() for r in rs)

    # Each refused record with its reason (at least once, as a message: written again by
    # a restart if it came after the last checkpoint).
    reasons = {bytes(dict(m.headers())[realtime.REJECT_HEADER]).decode(): m for m in refusals.got}
    assert len(reasons) == len(refused), list(reasons)
    cut = MAX_RECORD - 2 * realtime.OVERHEAD_BYTES - realtime.REJECT_KEY_BYTES
    for value, reason in refused.items():
        if reason == "not UTF-8":  # its text as Spark decodes it (replacement characters)
            match = [m for m in refusals.got if reason in _reason(m)]
            assert len(match) == 1 and match[0].value().startswith(value.split(b"\xff")[0])
            continue
        match = [
            m
            for m in refusals.got
            if reason in _reason(m)
            and int(dict(m.headers())[realtime.RECORD_BYTES_HEADER]) == len(value)
        ]
        assert match, (reason, len(value), list(reasons))
        assert match[0].value() == value[:cut], reason  # the record, cut to fit
    assert len({_reason(m) for m in refusals.got if f"more than {MAX_RECORD}" in _reason(m)}) == 2
    # Nothing of a refused record on the send queues: no order with a gap.
    assert not any(f"{run}-wide" in i or f"{run}-u" in i for i in ids)


def _reason(m: Any) -> str:
    return bytes(dict(m.headers())[realtime.REJECT_HEADER]).decode()


def _payload(m: Any) -> dict[str, Any]:
    schema = dict(m.headers())[schemas.SCHEMA_HEADER].decode()
    decoded: dict[str, Any] = schemas.decode(schema, m.value())
    return decoded


def _ids(got: list[Any]) -> set[str]:
    return {_payload(m)["record_id"] for m in got}


def test_a_topic_with_more_partitions_than_task_slots_is_refused(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    """Real-time mode holds a slot per upstream partition: one left without a slot would
    never be read, its progress looking normal. The session has local[2]."""
    upstream = new_topic("rt-wide", spark.sparkContext.defaultParallelism + 1)
    with pytest.raises(ValueError, match="task slots"):
        realtime.read_upstream(spark, upstream, kafka_options(kafka_bootstrap))


def test_the_upstream_topic_in_micro_batches_refuses_the_same_values_and_cuts_segments(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """`--source kafka` without `--real-time` (`sender.read_kafka` into `sender.start`):
    a value that is not one record is refused with its reason (to the rejects files), a
    large document goes in segments, and messages are dated by their upstream record."""
    upstream = new_topic("mb-up", 3)  # more partitions than slots: no slot is held here
    queue = new_topic("mb-send", 2)
    run = unique("mb")
    order = {
        "type": "purchase_order",
        "order_id": f"{run}-1",
        "customer_id": "C-1",
        "lines": [{"sku": s, "quantity": 1, "unit_price_cents": 5} for s in "ABC"],
    }
    document = {
        "type": "document",
        "document_id": f"{run}-doc",
        "name": "big.pdf",
        "content_base64": base64.b64encode(random.Random(9).randbytes(5000)).decode(),
    }
    two = json.dumps(order) + "\n" + json.dumps({**order, "order_id": f"{run}-2"})
    values = [json.dumps(order).encode(), json.dumps(document).encode(), two.encode(), b"\xff{"]
    _produce(kafka_bootstrap, upstream, list(enumerate(values)))
    config = sender.SenderConfig(
        (queue,),
        kafka_options(kafka_bootstrap),
        str(tmp_path / "checkpoint"),
        str(tmp_path / "rejects"),
        segment_bytes=1024,
        trigger_seconds=0.5,
    )
    records, created, reason = sender.read_kafka(spark, upstream, config.kafka)
    job = sender.start(spark, records, config, unique("mb-sender"), created=created,
                       extra_reason=reason)  # fmt: skip
    try:
        wait_until(lambda: job.metric("rejected") >= 2, 90, "the two values refused")
        wait_until(lambda: job.metric("messages") >= 4, 30, "the order and the document")
    finally:
        job.stop()
    assert job.failure() is None
    assert (job.metric("messages"), job.metric("rejected")) == (4, 2)
    rejected = spark.read.json(str(tmp_path / "rejects")).collect()
    assert sorted(r.reject_reason for r in rejected) == [
        "more than one JSON value in one Kafka record (send one record per value)",
        "the value is not UTF-8",
    ]
    got = Topics(kafka_bootstrap, [queue])

    def both() -> bool:
        got.count()
        headers = [dict(m.headers()) for m in got.got]
        return any(contract.SEGMENT_LAST in h for h in headers) and any(
            contract.FINAL in h for h in headers
        )

    try:
        wait_until(both, 30, "the order's final and the document's last segment")
    finally:
        got.close()
    segmented = [m for m in got.got if contract.SEGMENT_ID in dict(m.headers())]
    assert len(segmented) > 1  # the document went in segments
    seqs = [int(dict(m.headers())[contract.SEQ]) for m in got.got
            if dict(m.headers()).get(contract.GUARANTEE_ID) == f"po/{run}-1".encode()]  # fmt: skip
    assert seqs == [0, 1, 2]
    assert all(int(dict(m.headers())[domain.CREATED_HEADER]) in (T0, T0 + 1) for m in got.got)
