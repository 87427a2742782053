"""A Spark job stopped on request says so quietly, and its restart neither loses nor
re-sends: the sender, run as its own process (`python -m spark_jobs.sender`, local[1], a
small JVM), fed by Spark's rate source with a trigger shorter than its batches take (so a
batch starts as soon as the last one ends, and the stop meets a batch that must not be
written), stopped through `--stop-file`, then restarted from its checkpoint and stopped
again. Each run's log (the JVM's and Python's, one file) holds no ERROR line and no
traceback, one INFO line with what it finished and what it left for the restart, and one
line instead of Spark's per-batch "falling behind" warnings; the send queue holds every
purchase order of the rate's rows once, whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from router import contract
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until

pytestmark = pytest.mark.spark

STOPPED = re.compile(
    r" INFO +spark_jobs\.streaming sender stopped on request: finished batches \d+-\d+ "
    r"\(\d+ batches, \d+ input rows\); (batch \d+ was not started and runs again, with the "
    r"same input, after a restart|no batch left half-done: a restart) from "
)
BEHIND = re.compile(
    r" INFO +spark_jobs\.streaming sender: \d+ of \d+ batches took longer than the 0\.2 s "
    r"trigger interval \(slowest: batch \d+, [\d.]+ s\)"
)
SENT = re.compile(r"batch (\d+): \d+ messages sent")


def _run_until_stopped(command: list[str], log_path: Path, stop_file: Path, batches: int) -> str:
    """Start the sender, create its stop file once it sent `batches` batches, and return
    its log once it exited."""
    with log_path.open("wb") as log_file:
        job = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=dict(os.environ)
        )
        try:
            wait_until(
                lambda: len(SENT.findall(log_path.read_text())) >= batches,
                180,
                f"{batches} batches sent",
                interval=0.2,
                report=log_path.read_text,
            )
            stop_file.touch()
            job.wait(timeout=120)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
    log = log_path.read_text()
    assert job.returncode == 0, log
    return log


def _assert_quiet(log: str) -> None:
    lines = log.splitlines()
    assert not [line for line in lines if "ERROR" in line], log
    assert "Traceback" not in log and "Exception in thread" not in log, log
    assert not [line for line in lines if line.startswith("\tat ")], log  # a Java stack
    assert "Current batch is falling behind" not in log, log
    assert len(STOPPED.findall(log)) == 1, log
    assert len(BEHIND.findall(log)) == 1, log


def _groups(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Every purchase order's group on `topic`: guarantee ID -> its seqs, in offset order."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique("quiet"), "enable.auto.commit": False}
    )
    tp = TopicPartition(topic, 0, 0)
    _, high = consumer.get_watermark_offsets(tp, timeout=10)
    consumer.assign([tp])
    groups: dict[str, list[int]] = defaultdict(list)
    position = 0

    def read() -> bool:
        nonlocal position
        for m in consumer.consume(500, timeout=1.0):
            if m.error():
                continue
            position = m.offset() + 1
            headers = dict(m.headers() or [])
            gid = headers.get(contract.GUARANTEE_ID, b"").decode()
            if gid.startswith("po/"):
                groups[gid].append(int(headers[contract.SEQ]))
        return position >= high

    try:
        wait_until(read, 60, f"the send queue read to offset {high}", interval=0)
    finally:
        consumer.close()
    return groups


def test_a_sender_stopped_on_request_logs_no_error_and_resumes_exactly(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    queue = new_topic("spark-quiet", 1)
    stop_file = tmp_path / "stop"
    command = [
        sys.executable,
        "-m",
        "spark_jobs.sender",
        "--source=rate",
        "--rows-per-second=20",
        "--run-id=q",
        "--trigger-seconds=0.2",
        f"--checkpoint={tmp_path / 'checkpoint'}",
        f"--rejects={tmp_path / 'rejects'}",
        f"--send-queues={queue}",
        f"--bootstrap-servers={kafka_bootstrap}",
        "--master=local[1]",
        "--driver-memory=512m",
        "--shuffle-partitions=1",
        f"--stop-file={stop_file}",
    ]
    first = _run_until_stopped(command, tmp_path / "first.log", stop_file, 3)
    _assert_quiet(first)
    stop_file.unlink()
    again = _run_until_stopped(command, tmp_path / "again.log", stop_file, 2)
    _assert_quiet(again)
    left = re.search(r"batch (\d+) was not started and runs again", first)
    if left:  # the restart began with the batch the stop left
        assert re.search(rf"Resuming at batch {left[1]}|batch {left[1]}: \d+ messages", again)

    groups = _groups(kafka_bootstrap, queue)
    values = sorted(int(gid.removeprefix("po/q-")) for gid in groups)
    assert len(values) > 8, values
    # Rows 5..8 of every ten are purchase orders: each once, none missing, none re-sent.
    want = [v for v in range(values[-1] + 1) if 5 <= v % 10 <= 8]
    assert values == want
    assert all(seqs == list(range(len(seqs))) for seqs in groups.values()), groups
