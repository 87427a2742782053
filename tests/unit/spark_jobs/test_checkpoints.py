"""Which checkpoint manager a query starts with (pure: the paths' schemes as Hadoop resolved
them, and the manager the session's configuration names). The resolution itself, against
a real session, is in `tests/spark/test_receiver.py`."""

from __future__ import annotations

import pytest

from spark_jobs.checkpoints import LOCAL_MANAGER, choose


def test_a_query_that_writes_only_local_files_gets_the_file_system_manager() -> None:
    assert choose(["file"], None) == LOCAL_MANAGER
    assert choose(["file", "file"], None) == LOCAL_MANAGER  # checkpoint and sink output


@pytest.mark.parametrize(
    "schemes",
    [
        ["hdfs"],
        ["s3a"],
        ["file", "hdfs"],  # a local checkpoint, a file sink on HDFS: its log follows
        ["hdfs", "file"],
        ["abfss", "file"],
        [],
    ],
)
def test_any_other_file_system_keeps_sparks_choice(schemes: list[str]) -> None:
    assert choose(schemes, None) is None


@pytest.mark.parametrize(
    "configured",
    [
        "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager",
        "com.example.Manager",
        LOCAL_MANAGER,
    ],
)
def test_a_manager_the_configuration_names_stands(configured: str) -> None:
    assert choose(["file"], configured) is None
