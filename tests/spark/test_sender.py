"""The Spark sender: groups from business records, and a clean stop/restart that neither
loses nor re-sends (real Kafka, no router: the send queues are read back directly)."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from router import contract
from router.config import RoutingSettings
from router.contract import schemas, segments
from spark_jobs import domain, sender, workload
from spark_jobs.session import kafka_options
from spark_jobs.streaming import StreamJob
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until

pytestmark = pytest.mark.spark

SEGMENT = 1024


def _read_records(spark: Any, lines: list[str], tmp_path: Path) -> Any:
    path = tmp_path / "records.json"
    path.write_text("\n".join(lines) + "\n\n")
    return sender.parse_lines(spark.read.text(str(path)))


def test_records_become_groups_with_headers_and_bad_records_are_rejected(
    spark: Any, tmp_path: Path
) -> None:
    document = bytes(range(256)) * 10  # 2560 bytes: its Avro message is three segments
    good = [
        {
            "type": "purchase_order",
            "order_id": "PO-1",
            "customer_id": "C-1",
            "lines": [
                {"sku": "A", "quantity": 1, "unit_price_cents": 100},
                {"sku": "B", "quantity": 2, "unit_price_cents": 250},
            ],
        },
        {
            "type": "document",
            "document_id": "D-1",
            "name": "scan.pdf",
            "content_base64": base64.b64encode(document).decode(),
        },
        {"type": "stock_update", "update_id": "SU-1", "sku": "A", "warehouse": "W1", "delta": -2},
    ]
    bad = {
        "{not json": "malformed JSON line",
        json.dumps({"type": "refund", "order_id": "R-1"}): "unknown record type",
        json.dumps(
            {"type": "purchase_order", "order_id": "PO-2", "customer_id": "C", "lines": []}
        ): ("a purchase order needs order_id, customer_id and complete lines"),
        json.dumps(
            {"type": "document", "document_id": "D-2", "name": "x", "content_base64": "@@"}
        ): ("content_base64 is not base64"),
        json.dumps({"type": "stock_update", "update_id": "SU-2"}): (
            "a stock update needs update_id, sku, warehouse and delta"
        ),
        json.dumps(
            {
                "type": "purchase_order",
                "order_id": "P" * 300,
                "customer_id": "C",
                "lines": [{"sku": "A", "quantity": 1, "unit_price_cents": 1}],
            }
        ): ("business key too long for a guarantee ID (> 256 bytes)"),
    }
    lines = [json.dumps(r) for r in good] + list(bad)
    queues = ("sq.1", "sq.2", "sq.3")
    config = sender.SenderConfig(queues, {}, "unused", "unused", segment_bytes=SEGMENT)
    stream = sender.sender_stream(_read_records(spark, lines, tmp_path), config)
    rows = stream.where("reject_reason IS NOT NULL").collect()
    rejects = {r.record: r.reject_reason for r in rows}
    assert rejects == bad

    good_messages = stream.where("reject_reason IS NULL").select(*sender.MESSAGE_COLUMNS)
    messages = sender.to_kafka_rows(good_messages, queues, "complete", SEGMENT).collect()
    got = []
    pieces: list[tuple[int, bytes]] = []
    for r in messages:
        headers = {h.key: bytes(h.value) for h in r.headers}
        name = headers[schemas.SCHEMA_HEADER].decode()
        routing = contract.parse(list(headers.items()), RoutingSettings())
        seg = segments.read(list(headers.items()))
        assert segments.problem(list(headers.items()), routing.guarantee_id, routing.final) is None
        assert r.topic in queues
        assert int(headers[domain.CREATED_HEADER]) > 0
        if seg is not None:  # the document, in segments of the router's contract
            assert name == domain.DOCUMENT_MESSAGE and len(bytes(r.value)) <= SEGMENT
            assert routing.guarantee_id == seg.set_id  # a group of its own
            assert bytes(r.key) == b"D-1"  # the key given: every segment on one partition
            assert (routing.seq, routing.final) == (seg.index, seg.last)
            pieces.append((seg.index, bytes(r.value)))
            if seg.last:
                whole = b"".join(v for _, v in sorted(pieces))
                assert (seg.total, seg.sha256) == (len(whole), hashlib.sha256(whole).hexdigest())
                payload = schemas.decode(name, whole)
                assert payload["content"] == document
                got.append((payload["record_id"], None, 0, False))
            continue
        payload = schemas.decode(name, bytes(r.value))
        assert bytes(r.key).decode() == (routing.guarantee_id or payload["record_id"])
        assert routing.complete == (routing.guarantee_id is not None)  # --delivery complete
        got.append((payload["record_id"], routing.guarantee_id, routing.seq or 0, routing.final))
        if routing.guarantee_id is not None:
            assert routing.seq == payload["line_no"]
    assert len(pieces) == 3
    expected = domain.expected_from_lines([json.dumps(r) for r in good])
    assert sorted(got, key=str) == sorted(
        ((s.record_id, s.group, s.seq, s.final) for s in expected), key=str
    )
    # One send queue per group, the same every time (a stable hash of the key).
    by_group: dict[bytes, set[str]] = defaultdict(set)
    for r in messages:
        by_group[bytes(r.key)].add(r.topic)
    assert all(len(topics) == 1 for topics in by_group.values())


def _is_segment(m: Any) -> bool:
    return segments.read(m.headers()) is not None


def _last_segment(m: Any) -> bool:
    seg = segments.read(m.headers())
    return seg is not None and seg.last


def _read_back(bootstrap: str, topics: list[str], expected: int) -> list[tuple[str, int, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("sender-check"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    meta = consumer.list_topics(timeout=10).topics
    consumer.assign([TopicPartition(t, p, 0) for t in topics for p in meta[t].partitions])
    got: list[tuple[str, int, Any]] = []

    def enough() -> bool:
        for m in consumer.consume(500, 0.2):
            assert m.error() is None, m.error()
            got.append((m.topic(), m.partition(), m))
        # A message in segments counts once, at its last segment.
        logical = [x for x in got if not _is_segment(x[2]) or _last_segment(x[2])]
        return len(logical) >= expected

    try:
        wait_until(enough, 60, f"{expected} messages on the send queues")
        enough()  # anything beyond `expected` (a re-send) would show up now
    finally:
        consumer.close()
    return got


def test_a_stopped_and_restarted_sender_neither_loses_nor_resends(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    queues = (new_topic("spark-send", 3), new_topic("spark-send", 3))
    run = unique("snd")
    items = workload.records(
        workload.BusinessWorkload(run, orders=40, documents=6, updates=60, max_document_bytes=8000)
    )
    chunks = workload.split(items, 4)
    inbox = tmp_path / "input"
    config = sender.SenderConfig(
        queues,
        kafka_options(kafka_bootstrap),
        str(tmp_path / "checkpoint"),
        str(tmp_path / "rejects"),
        segment_bytes=SEGMENT,
        trigger_seconds=0.5,
    )

    def expected(n_chunks: int) -> int:
        return sum(len(domain.expected_messages(r, SEGMENT)) for c in chunks[:n_chunks] for r in c)

    writing = threading.Event()

    class Observed(sender.SendBatch):
        def __call__(self, df: Any, batch_id: int) -> None:
            writing.set()
            super().__call__(df, batch_id)

    def start() -> StreamJob:
        records = sender.read_files(spark, str(inbox), 1)
        return sender.start(spark, records, config, unique("sender"), Observed(config))

    workload.drop(inbox, "a.json", chunks[0])
    job = start()
    wait_until(lambda: job.sink.last_written >= 0, 90, "the first batch sent")
    # Stop while a micro-batch is being written: stop() lets it finish and commit.
    writing.clear()
    workload.drop(inbox, "b.json", chunks[1])
    wait_until(writing.is_set, 60, "the second batch to start writing")
    job.stop()
    assert job.failure() is None
    sent_first = job.metric("messages")
    assert sent_first == expected(2)

    workload.drop(inbox, "c.json", chunks[2])  # arrives while the sender is down
    job = start()
    workload.drop(inbox, "d.json", chunks[3])
    wait_until(lambda: job.metric("messages") >= expected(4) - sent_first, 90, "the rest sent")
    job.stop()
    assert job.failure() is None
    assert job.metric("messages") == expected(4) - sent_first

    got = _read_back(kafka_bootstrap, list(queues), expected(4))
    ids = []
    partition_of: dict[str, set[tuple[str, int]]] = defaultdict(set)
    seqs: dict[str, list[int]] = defaultdict(list)
    pieces: dict[str, list[bytes]] = defaultdict(list)
    for topic, partition, m in sorted(got, key=lambda x: (x[0], x[1], x[2].offset())):
        headers = dict(m.headers())
        gid = headers.get(contract.GUARANTEE_ID)
        if gid is not None:
            partition_of[gid.decode()].add((topic, partition))
            seqs[gid.decode()].append(int(headers[contract.SEQ]))
        seg = segments.read(m.headers())
        value = m.value()
        if seg is not None:  # a document's segment: in index order on its partition
            assert seg.index == len(pieces[seg.set_id])
            pieces[seg.set_id].append(value)
            if not seg.last:
                continue
            value = b"".join(pieces[seg.set_id])
            assert hashlib.sha256(value).hexdigest() == seg.sha256
        payload = schemas.decode(headers[schemas.SCHEMA_HEADER].decode(), value)
        ids.append(payload["record_id"])
    sent = domain.expected_from_lines([json.dumps(r) for c in chunks for r in c], SEGMENT)
    assert sorted(ids) == sorted(s.record_id for s in sent)  # each exactly once
    assert all(len(p) == 1 for p in partition_of.values())  # a group on one partition
    assert all(s == list(range(len(s))) for s in seqs.values())  # in order
    assert any(len(p) > 1 for p in pieces.values())  # some documents went in segments
