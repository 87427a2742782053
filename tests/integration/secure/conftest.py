"""The secured stack for the security tests: Redis with ACL users over TLS, Kafka with
SASL_SSL (SCRAM-SHA-512) and ACLs (ops/secure.sh), on free ports in a folder of this
session's own; started on first use, stopped at the end. The plain stack is untouched.

Tests marked `secure` are the heavy ones (whole pipelines): they run with
`make test-secure` (ROUTER_TEST_SECURE=1) and are skipped by `make test`, which runs the
short ones."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.harness.securestack import SecureStack

ROOT = Path(__file__).resolve().parents[3]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("ROUTER_TEST_SECURE"):
        return
    skip = pytest.mark.skip(reason="heavy security test: run by make test-secure")
    for item in items:
        if item.get_closest_marker("secure") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    if os.environ.get("ROUTER_STACK", "local") != "local":
        pytest.skip("the secured stack is the project's own local one (ops/secure.sh)")
    stack = SecureStack.private(ROOT / "ops" / "secure.sh", tmp_path_factory.mktemp("secure"))
    yield stack
    stack.down()


@pytest.fixture(scope="session")
def secure_redis(secure_stack: SecureStack) -> SecureStack:
    secure_stack.up("redis-up")
    return secure_stack


@pytest.fixture(scope="session")
def secure_kafka(secure_stack: SecureStack) -> SecureStack:
    secure_stack.up("kafka-up")
    return secure_stack
