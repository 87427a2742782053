"""One local SparkSession for every Spark test (starting one costs ~10 s).

Small on purpose: local[2], two shuffle partitions, 1 GiB driver, no UI; the Kafka
connector and Avro jars come from `.cache/jars/` (`make jars`), never downloaded here.
Spark is a JVM: with ROUTER_STACK=docker or external (no Java or Maven needed for the
servers, and `make test` fetches no jars) the tests that need a session are skipped when
Java or the jars are missing; with the default local stack they fail, as before.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from spark_jobs.session import SparkOptions, build_session, connector_jars
from tests.fixtures.helpers import said_if_slow


def _missing_for_spark() -> str | None:
    if shutil.which("java") is None:
        return "no `java` on PATH"
    try:
        connector_jars()
    except FileNotFoundError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if os.environ.get("ROUTER_STACK", "local") != "local":
        missing = _missing_for_spark()
        if missing:
            pytest.skip(f"Spark needs Java and the connector jars (make jars): {missing}")
    session = build_session(
        SparkOptions(
            master="local[2]",
            app_name="router-tests",
            shuffle_partitions=2,
            driver_memory="1g",
        )
    )
    yield session
    with said_if_slow("the Spark session"):
        session.stop()
