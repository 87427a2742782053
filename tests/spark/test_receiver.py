"""The Spark receiver on real Kafka (messages written by Python, no router in between):
what it reassembles, what it reports, and a receiver killed inside a micro-batch after
which a streaming reader of its output sees every group once."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from spark_jobs import checkpoints, domain, outputs, receiver
from spark_jobs.session import kafka_options
from spark_jobs.streaming import StreamJob
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.spark_messages import NOW, Queues, document, order_line, stock

pytestmark = pytest.mark.spark


def _start(spark: Any, config: receiver.ReceiverConfig) -> StreamJob:
    return receiver.start(spark, replace(config, trigger_seconds=0.5), unique("receiver"))


def _outputs(spark: Any, output: Path) -> dict[str, list[Any]]:
    """Each output's rows, read through the file sink's log."""
    if not (output / "_spark_metadata").is_dir():
        return {name: [] for name in outputs.OUTPUTS}
    return {name: outputs.read(spark, str(output), name).collect() for name in outputs.OUTPUTS}


def test_receiver_reassembles_groups_and_reports_what_breaks_a_guarantee(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    q1, q2 = new_topic("spark-recv"), new_topic("spark-recv")
    w = Queues(kafka_bootstrap)
    w.order(q1, "GOOD", 3)
    content = bytes(range(256)) * 9  # 2304 bytes: a document in three segments of 1024
    w.produce(w.segmented(q2, document("DOC", content), 1024, domain.DOCUMENT_MESSAGE))
    w.send(q1, stock("SU-1"), domain.STOCK)
    w.send(q2, stock("SU-1"), domain.STOCK)  # the same record again: a duplicate
    w.send(q1, order_line("DUP", 0, 2), domain.ORDER_LINE, "po/DUP", 0)
    w.send(q1, order_line("DUP", 0, 2), domain.ORDER_LINE, "po/DUP", 0)  # re-sent copy
    w.send(q1, order_line("DUP", 1, 2), domain.ORDER_LINE, "po/DUP", 1, True)
    w.send(q1, order_line("SPLIT", 0, 2), domain.ORDER_LINE, "po/SPLIT", 0)
    w.send(q2, order_line("SPLIT", 1, 2), domain.ORDER_LINE, "po/SPLIT", 1, True)
    w.order(q1, "GAP", 3, skip=1)
    w.order(q2, "OPEN", 4, skip=3)  # never finished: reported after the group timeout
    w.send(q1, b"\x00garbage", domain.STOCK)
    w.send(q1, stock("SU-2"), None)  # no schema header
    w.send(q2, order_line("OTHER", 0, 1), domain.ORDER_LINE, "po/MISLABELLED", 0, True)
    # Created an hour later: event time moves past OPEN's group timeout.
    w.send(q1, stock("TICK", NOW + dt.timedelta(hours=1)), domain.STOCK)
    w.flush()

    config = receiver.ReceiverConfig(
        (q1, q2),
        kafka_options(kafka_bootstrap),
        str(tmp_path / "checkpoint"),
        str(tmp_path / "output"),
        group_timeout_ms=3_000,
    )
    job = _start(spark, config)
    try:
        # A local checkpoint is written through Spark's file-system manager (no process
        # started per file: `spark_jobs.checkpoints`), and the session is left as it was.
        execution = job.query._jsq.streamingQuery()
        logs = (execution.offsetLog(), execution.commitLog(), execution.sink().fileLog())
        for metadata_log in logs:
            manager = metadata_log.fileManager().getClass().getName()
            assert manager == checkpoints.LOCAL_MANAGER
        assert spark.conf.get(checkpoints.CHECKPOINT_MANAGER_CONF, None) is None
        messages = w.count - 2  # the document's three segments are one message
        wait_until(lambda: job.accounted >= messages, 120, f"{messages} messages accounted for")
        # A copy of SU-1, created with it, arrives after the watermark passed: dropped by
        # Spark, and counted.
        w.send(q2, stock("SU-1"), domain.STOCK)
        w.flush()
        wait_until(lambda: job.dropped_by_watermark >= 1, 60, "the late row counted")
    finally:
        job.stop()
    assert job.failure() is None
    assert job.dropped_by_watermark == 1
    assert job.duplicates_dropped == 1  # SU-1's copy: ordinary copies are counted
    out = _outputs(spark, tmp_path / "output")

    groups = {g.guarantee_id: g for g in out["groups"]}
    assert sorted(groups) == ["po/DUP", "po/GOOD"]
    good = groups["po/GOOD"]
    assert (good.kind, good.queue, good.messages) == ("purchase_order", q1, 3)
    assert [m.record_id for m in good.members] == ["GOOD/0", "GOOD/1", "GOOD/2"]
    assert [line.quantity for line in good.purchase_order.lines] == [1, 2, 3]
    assert good.purchase_order.total_cents == 600
    (doc,) = [r for r in out["records"] if r.kind == "document"]
    assert (doc.record_id, doc.guarantee_id, doc.queue) == ("DOC", None, q2)
    assert bytes(doc.document.content) == content and doc.document.segments == 3
    assert len(doc.parts) == 3

    assert sorted(r.record_id for r in out["records"]) == ["DOC", "SU-1", "TICK"]
    assert [d.record_id for d in out["duplicates"]] == ["DUP/0"]  # a group member's copy

    reasons = {(v.guarantee_id, v.record_id): v.reason for v in out["violations"]}
    assert reasons[("po/SPLIT", "SPLIT/1")].startswith("split")
    assert reasons[("po/SPLIT", "SPLIT/0")].startswith("in a broken group: split")
    assert reasons[("po/GAP", "GAP/2")].startswith("order: seq 2 arrived where seq 1 was due")
    assert reasons[("po/GAP", "GAP/0")].startswith("in a broken group")
    for line in range(3):
        assert reasons[("po/OPEN", f"OPEN/{line}")].startswith("incomplete")
    unreadable = sorted(v.reason for v in out["violations"] if v.record_id is None)
    assert unreadable == [
        "undecodable: no 'schema' header",
        f"undecodable: not a valid {domain.STOCK}",
    ]
    assert reasons[("po/MISLABELLED", "OTHER/0")].startswith("header mismatch: guarantee-id")
    assert len(out["violations"]) == 10
    # Every message is in exactly one output.
    accounted = sum(g.messages for g in out["groups"]) + sum(
        len(out[n]) for n in ("records", "duplicates", "violations")
    )
    # All but the late copy and SU-1's (both counted); three segments, one record.
    assert accounted == w.count - 1 - 1 - 2


def test_a_batch_replayed_after_a_kill_reaches_a_streaming_reader_once(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    queues = (new_topic("spark-recv"), new_topic("spark-recv"))
    w = Queues(kafka_bootstrap)
    orders = 60
    for i in range(orders):
        # Interleaved on each queue, so most groups span several micro-batches.
        w.order(queues[i % 2], f"R{i}", 2 + i % 7)
        w.send(queues[(i + 1) % 2], stock(f"SU-{i}"), domain.STOCK)
    w.flush()
    expected_messages = w.count
    config = receiver.ReceiverConfig(
        queues,
        kafka_options(kafka_bootstrap),
        str(tmp_path / "checkpoint"),
        str(tmp_path / "output"),
        max_offsets_per_trigger=60,
    )
    checkpoint = Path(config.checkpoint)

    def inside_a_batch() -> int | None:
        """A batch (from the third on) whose offsets are logged and whose commit is not."""
        for n in range(2, 100):
            if (checkpoint / "offsets" / str(n)).exists():
                if not (checkpoint / "commits" / str(n)).exists():
                    return n
            else:
                return None
        return None

    # The receiver as its own driver process (`router spark receiver`), SIGKILLed inside
    # a micro-batch: its files may be half written, and the batch is not in the sink's log.
    log = (tmp_path / "receiver.log").open("w")
    driver = subprocess.Popen(
        [
            sys.executable, "-m", "spark_jobs.receiver",
            "--receive-queues", ",".join(queues), "--bootstrap-servers", kafka_bootstrap,
            "--output", config.output, "--checkpoint", config.checkpoint,
            "--max-offsets-per-trigger", "60", "--trigger-seconds", "0.5",
            "--master", "local[2]", "--shuffle-partitions", "2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: driver.poll() is not None or inside_a_batch(), 180, "a micro-batch under way"
        )
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
        log.close()
    interrupted = inside_a_batch()
    assert interrupted is not None, (tmp_path / "receiver.log").read_text()[-3000:]
    committed = outputs.read(spark, config.output).agg(F.sum("messages")).first()[0] or 0
    assert committed < expected_messages

    job = _start(spark, config)
    try:
        wait_until(
            lambda: committed + job.metric("messages") >= expected_messages,
            120,
            "every message accounted for after the restart",
        )
    finally:
        job.stop()
    assert job.failure() is None
    # The restarted run began by repeating the interrupted batch.
    assert job.query.recentProgress[0]["batchId"] == interrupted

    # A streaming reader of the output (through the sink's log) sees every group once.
    output = config.output
    schema = outputs.read(spark, output).schema
    name = unique("reader").replace("-", "_")
    reader = (
        spark.readStream.schema(schema)
        .parquet(output)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    assert reader.awaitTermination(120), "the output reader did not finish in 120 s"
    assert reader.exception() is None
    rows = spark.table(name).collect()
    by_output = Counter(r.output for r in rows)
    assert by_output == {"groups": orders, "records": orders}
    members = Counter(m.record_id for r in rows if r.output == "groups" for m in r.members)
    assert all(n == 1 for n in members.values())
    assert sum(members.values()) == expected_messages - orders
    records = sorted(r.record_id for r in rows if r.output == "records")
    assert records == sorted(f"SU-{i}" for i in range(orders))
    for g in (r for r in rows if r.output == "groups"):
        assert [m.seq for m in g.members] == list(range(g.messages))
