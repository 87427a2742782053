"""A Spark job stopped on request says so quietly: the sender, run as its own process
(`python -m spark_jobs.sender`, local[1], a small JVM), fed by Spark's rate source with a
trigger shorter than its batches take (so a batch starts as soon as the last one ends,
and the stop meets a batch that must not be written), stopped through `--stop-file`.
Its log (the JVM's and Python's, one file) holds no ERROR line and no traceback, one
INFO line with what it finished and what it left for the restart, and one line instead
of Spark's per-batch "falling behind" warnings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import wait_until

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


def test_a_sender_stopped_on_request_logs_no_error_and_one_summary(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    queue = new_topic("spark-quiet", 1)
    stop_file = tmp_path / "stop"
    log_path = tmp_path / "sender.log"
    command = [
        sys.executable,
        "-m",
        "spark_jobs.sender",
        "--source=rate",
        "--rows-per-second=20",
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
    with log_path.open("wb") as log_file:
        job = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=dict(os.environ)
        )
        try:
            wait_until(
                lambda: re.search(r"batch [2-9]\d*: \d+ messages sent", log_path.read_text()),
                180,
                "the sender's third batch sent",
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
    assert not [line for line in log.splitlines() if "ERROR" in line], log
    assert "Traceback" not in log and "Exception" not in log, log
    assert "Current batch is falling behind" not in log, log
    assert len(STOPPED.findall(log)) == 1, log
    assert len(BEHIND.findall(log)) == 1, log
