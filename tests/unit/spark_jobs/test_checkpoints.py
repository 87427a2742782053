"""Which checkpoint manager a query starts with (pure: a session's settings by hand)."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.checkpoints import CHECKPOINT_MANAGER_CONF, LOCAL_MANAGER, is_local, manager_for


class _Conf:
    def __init__(self, **values: str) -> None:
        self.values = dict(values)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _Session:
    def __init__(self, **values: str) -> None:
        self.conf = _Conf(**values)


@pytest.mark.parametrize(
    ("path", "local"),
    [
        ("/var/lib/router/checkpoints/receiver", True),
        ("checkpoints/receiver", True),
        ("file:///var/lib/router/checkpoints", True),
        ("file:/tmp/x", True),
        ("hdfs://namenode:8020/checkpoints", False),
        ("s3a://bucket/checkpoints", False),
        ("abfss://c@account.dfs.core.windows.net/cp", False),
    ],
)
def test_local_paths_are_those_without_a_scheme_or_file(path: str, local: bool) -> None:
    assert is_local(path) is local


def test_a_local_checkpoint_starts_with_the_file_system_manager_the_session_restored() -> None:
    spark = _Session()
    with manager_for(spark, "/tmp/cp") as chosen:
        assert chosen == LOCAL_MANAGER
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF) == LOCAL_MANAGER
    assert spark.conf.get(CHECKPOINT_MANAGER_CONF) is None


def test_a_remote_checkpoint_keeps_sparks_choice() -> None:
    spark = _Session()
    with manager_for(spark, "hdfs://nn/cp") as chosen:
        assert chosen is None
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF) is None


def test_the_sessions_own_choice_stands() -> None:
    spark = _Session(**{CHECKPOINT_MANAGER_CONF: "com.example.Manager"})
    with manager_for(spark, "/tmp/cp") as chosen:
        assert chosen is None
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF) == "com.example.Manager"
    assert spark.conf.get(CHECKPOINT_MANAGER_CONF) == "com.example.Manager"


def test_the_setting_is_undone_when_the_start_fails() -> None:
    spark = _Session()
    with pytest.raises(RuntimeError), manager_for(spark, "/tmp/cp"):
        raise RuntimeError("the query did not start")
    assert spark.conf.get(CHECKPOINT_MANAGER_CONF) is None
