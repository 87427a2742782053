"""The Spark demo starts the local stack when Kafka or Redis does not answer: with the
repository's own ops/stack.sh (a fresh clone's `make spark-demo` once looked for it under
ops/ops/ and stopped with "there is no ops/stack.sh here")."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ops.harness.stack import localstack as spark_demo
from router.config import KafkaSettings, RedisSettings, RouterSettings


def test_nothing_answers_so_the_repositorys_stack_script_is_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[list[str]] = []

    def run(cmd: list[str], **kwargs: Any) -> None:
        runs.append(cmd)

    monkeypatch.setattr(spark_demo.subprocess, "run", run)
    nowhere = RouterSettings(  # port 1: nothing listens there
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"),
        redis=RedisSettings(url="redis://127.0.0.1:1/0"),
    )
    said: list[str] = []
    spark_demo.ensure_stack(nowhere, said.append)
    assert runs == [[str(spark_demo.STACK_SCRIPT), "up"]]
    assert spark_demo.STACK_SCRIPT.is_file() and os.access(spark_demo.STACK_SCRIPT, os.X_OK)
    assert said == ["   starting the local stack (ops/stack.sh up) ..."]
