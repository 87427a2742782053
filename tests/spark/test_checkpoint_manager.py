"""Which checkpoint manager a query starts with, resolved against a real session: the
paths' file systems as Hadoop resolves them (a path without a scheme against
`fs.defaultFS`), and a manager named in the session's Hadoop configuration. That a
receiver's logs are then written through it is asserted in `test_receiver.py`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from spark_jobs.checkpoints import CHECKPOINT_MANAGER_CONF, LOCAL_MANAGER, manager_for

pytestmark = pytest.mark.spark

FILE_CONTEXT = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
)


@contextmanager
def _hadoop(spark: Any, key: str, value: str) -> Iterator[None]:
    """`key` set in the SparkContext's Hadoop configuration (as `spark.hadoop.*` or
    core-site.xml would), restored after."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    before = conf.get(key)
    conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            conf.unset(key)
        else:
            conf.set(key, before)


def _chosen(spark: Any, *paths: str) -> str | None:
    with manager_for(spark, *paths) as chosen:
        inside = spark.conf.get(CHECKPOINT_MANAGER_CONF, None)
    assert inside == chosen
    assert spark.conf.get(CHECKPOINT_MANAGER_CONF, None) is None
    return chosen


def test_local_paths_get_the_file_system_manager(spark: Any, tmp_path: Any) -> None:
    assert _chosen(spark, str(tmp_path / "cp")) == LOCAL_MANAGER
    assert _chosen(spark, f"file://{tmp_path}/cp", str(tmp_path / "out")) == LOCAL_MANAGER


def test_another_file_system_for_either_path_keeps_sparks_choice(spark: Any, tmp_path: Any) -> None:
    assert _chosen(spark, "hdfs://namenode:8020/cp") is None
    assert _chosen(spark, "s3a://bucket/cp") is None
    # A local checkpoint, a file sink on HDFS: the sink's log is written by the same manager.
    assert _chosen(spark, str(tmp_path / "cp"), "hdfs://namenode:8020/out") is None


def test_a_path_without_a_scheme_follows_the_default_file_system(spark: Any) -> None:
    with _hadoop(spark, "fs.defaultFS", "hdfs://namenode:8020"):
        assert _chosen(spark, "/data/orders/receiver-ckpt") is None
        assert _chosen(spark, "file:///data/orders/receiver-ckpt") == LOCAL_MANAGER


def test_a_manager_named_in_the_hadoop_configuration_stands(spark: Any, tmp_path: Any) -> None:
    with _hadoop(spark, CHECKPOINT_MANAGER_CONF, FILE_CONTEXT):
        assert _chosen(spark, str(tmp_path / "cp")) is None
    spark.conf.set(CHECKPOINT_MANAGER_CONF, FILE_CONTEXT)
    try:
        with manager_for(spark, str(tmp_path / "cp")) as chosen:
            assert chosen is None
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF) == FILE_CONTEXT
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_CONF)
