"""`spark_jobs` under Spark Connect (issue 16, item 6): a local Spark Connect server (the
`spark-connect` jar that pyspark ships, with the cached Kafka connector and Avro jars), a
client session (`build_session(SparkOptions(remote=...))`, `pyspark[connect]`), on the
real broker:

* the API unchanged: `to_router_rows` with segments into Kafka, `read_router_queues` and
  `complete_groups` (a streaming query, its stateful step run by the server's Python
  workers) back out;
* the jobs unchanged: the sender (`foreachBatch`, run in the server's Python worker) and
  the receiver (the file sink) started with `sender.start`/`receiver.start`, their counts
  from the queries' progress (a client-side listener), the sender stopped between
  micro-batches by its stop marker, the receiver's output read back."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from spark_jobs import api, domain, groups, outputs, receiver, sender, workload
from spark_jobs.api import ROCKSDB_PROVIDER, STATE_PROVIDER_CONF
from spark_jobs.session import SparkOptions, build_session, connector_jars, kafka_options
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.paths import ROOT

pytestmark = pytest.mark.spark

SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    port = _free_port()
    home = Path(pyspark.__file__).parent
    log_path = tmp_path_factory.mktemp("connect") / "server.log"
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,  # the server's Python workers: this venv
        "PYTHONPATH": str(ROOT),
    }
    command = [
        str(home / "bin" / "spark-submit"),
        "--class", SERVER,
        "--master", "local[2]",
        "--driver-memory", "1g",
        "--jars", ",".join(connector_jars()),
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.session.timeZone=UTC",
        "--conf", "spark.speculation=false",
        "--conf", f"{STATE_PROVIDER_CONF}={ROCKSDB_PROVIDER}",  # transformWithState needs it
        "spark-internal",
    ]  # fmt: skip
    with log_path.open("w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(
            lambda: server.poll() is not None or _answers(port),
            180,
            "the Spark Connect server to listen",
            interval=0.5,
        )
        assert server.poll() is None, log_path.read_text()[-3000:]
        # pyspark.sql.functions dispatch to Connect while this is set (as
        # `SparkSession.builder.remote(...)` sets it); unset after, for the other tests.
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        session = build_session(SparkOptions(remote=f"sc://127.0.0.1:{port}"))
        yield session
        session.stop()
    finally:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)


def test_the_api_runs_unchanged_under_spark_connect(
    connect: Any, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    spark = connect
    assert type(spark).__module__.startswith("pyspark.sql.connect")
    rng = random.Random(11)
    rows = [(f"g/{g}", i, i == 2, rng.randbytes(1500 if i == 1 else 40)) for g in range(4)
            for i in range(3)]  # fmt: skip
    rows += [(None, 0, False, rng.randbytes(3000)), (None, 0, False, b"small")]
    df = spark.createDataFrame(rows, "gid STRING, n INT, last BOOLEAN, body BINARY")
    queue = new_topic("spark-connect", 2)
    kafka = kafka_options(kafka_bootstrap)
    (
        api.to_router_rows(
            df, group_id="gid", sequence="n", final="last", payload="body", segment_bytes=1024
        )
        .write.format("kafka")
        .options(**kafka)
        .option("topic", queue)
        .save()
    )
    messages = api.read_router_queues(spark, [queue], **kafka)
    name = unique("connect_out").replace("-", "_")
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
            lambda: not query.isActive or spark.table(name).count() >= 6,
            180,
            "6 outcomes through Spark Connect",
            interval=0.5,
        )
    finally:
        query.stop()
    assert query.exception() is None
    outcomes = spark.table(name).collect()
    found = {o.guarantee_id: o for o in outcomes if o.output == groups.GROUP}
    assert sorted(found) == [f"g/{g}" for g in range(4)]
    for gid, o in found.items():
        want = [r[3] for r in rows if r[0] == gid]
        assert [bytes(v) for v in o.members_value] == want
        assert [len(p) for p in o.members_parts] == [1, 2, 1]  # 1500 bytes: two segments
    records = sorted(bytes(o.value) for o in outcomes if o.output == groups.RECORD)
    assert records == sorted(r[3] for r in rows if r[0] is None)


def test_the_jobs_run_unchanged_under_spark_connect(
    connect: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    spark = connect
    queues = (new_topic("spark-connect-jobs", 2), new_topic("spark-connect-jobs", 2))
    items = workload.records(
        workload.BusinessWorkload(
            unique("cj"), orders=12, documents=2, updates=20, max_document_bytes=3000
        )
    )
    inbox = tmp_path / "input"
    for i, chunk in enumerate(workload.split(items, 2)):
        workload.drop(inbox, f"records-{i}.json", chunk)
    expected = sum(len(domain.expected_messages(r)) for r in items)
    kafka = kafka_options(kafka_bootstrap)
    send_config = sender.SenderConfig(
        queues, kafka, str(tmp_path / "send-ckpt"), str(tmp_path / "rejects"), trigger_seconds=0.5
    )
    send = sender.start(
        spark, sender.read_files(spark, str(inbox)), send_config, unique("connect-sender")
    )
    recv = receiver.start(
        spark,
        receiver.ReceiverConfig(
            queues,
            kafka,
            str(tmp_path / "recv-ckpt"),
            str(tmp_path / "output"),
            trigger_seconds=0.5,
        ),
        unique("connect-receiver"),
    )
    try:
        wait_until(lambda: recv.accounted >= expected, 180, f"{expected} messages received")
    finally:
        send.stop()
        recv.stop()
    assert send.failure() is None and recv.failure() is None
    assert send.metric("messages") == expected and send.metric("rejected") == 0
    out = {n: outputs.read(spark, str(tmp_path / "output"), n).count() for n in outputs.OUTPUTS}
    assert out == {"groups": 12, "records": 22, "duplicates": 0, "violations": 0, "expired": 0}
    assert recv.metric("messages") == expected
    # Stopped between micro-batches: the sender's last batch was committed, not refused
    # after writing, so a restart sends nothing again.
    again = sender.start(
        spark, sender.read_files(spark, str(inbox)), send_config, unique("connect-sender")
    )
    try:
        wait_until(
            lambda: again.query.lastProgress is not None, 60, "the restarted sender's first trigger"
        )
    finally:
        again.stop()
    assert again.failure() is None and again.metric("messages") == 0
