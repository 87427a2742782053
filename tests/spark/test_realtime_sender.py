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

MAX_PAYLOAD = 4096  # a document above it is refused (the real-time sender cuts no segments)
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


def _produce(bootstrap: str, topic: str, lines: list[tuple[int, str]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for number, line in lines:
        producer.produce(topic, line.encode(), timestamp=T0 + number)
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
        "content_base64": base64.b64encode(random.Random(5).randbytes(6000)).decode(),
    }
    refused = {
        "{not json": "malformed JSON line",
        json.dumps({"type": "purchase_order", "order_id": f"{run}-x"}): "a purchase order needs",
        json.dumps({"type": "invoice"}): "unknown record type",
        json.dumps(big): f"larger than {MAX_PAYLOAD}",
    }
    half = len(good) // 2
    numbered = list(enumerate([json.dumps(r) for r in good]))
    bad_lines = [(len(good) + i, line) for i, line in enumerate(refused)]
    config = realtime.RealTimeConfig(
        queues,
        rejects,
        kafka_options(kafka_bootstrap),
        str(tmp_path / "checkpoint"),
        checkpoint_seconds=5.0,
        max_payload_bytes=MAX_PAYLOAD,
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
        wait_until(lambda: refusals.count() >= len(refused), 30, "the refused records")
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
    for line, reason in refused.items():
        match = [m for text, m in reasons.items() if reason in text]
        assert len(match) == 1, (reason, list(reasons))
        length = int(dict(match[0].headers())[realtime.RECORD_BYTES_HEADER])
        if line == json.dumps(big):  # named, not copied: its payload is over the limit
            assert json.loads(match[0].value())["record_id"] == big["document_id"]
            assert length > MAX_PAYLOAD
        else:
            assert match[0].value() == line.encode() and length == len(line.encode())


def _payload(m: Any) -> dict[str, Any]:
    schema = dict(m.headers())[schemas.SCHEMA_HEADER].decode()
    decoded: dict[str, Any] = schemas.decode(schema, m.value())
    return decoded


def _ids(got: list[Any]) -> set[str]:
    return {_payload(m)["record_id"] for m in got}
