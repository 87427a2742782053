"""Fixtures of the management-table tests: the model and the real table in lockstep."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from tests.fixtures.tablepair import Both


@pytest.fixture
def both(redis_url: str) -> Iterator[Callable[[list[str]], Both]]:
    client = redis.Redis.from_url(redis_url)
    made: list[Both] = []

    def make(dests: list[str]) -> Both:
        made.append(Both(client, dests))
        return made[-1]

    yield make
    for b in made:
        b.table.drop()
