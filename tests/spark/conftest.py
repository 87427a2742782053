"""One local SparkSession for every Spark test (starting one costs ~10 s).

Small on purpose: local[2], two shuffle partitions, 1 GiB driver, no UI; the Kafka
connector and Avro jars come from `.cache/jars/` (`make jars`), never downloaded here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spark_jobs.session import SparkOptions, build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = build_session(
        SparkOptions(
            master="local[2]",
            app_name="router-tests",
            shuffle_partitions=2,
            driver_memory="1g",
        )
    )
    yield session
    session.stop()
