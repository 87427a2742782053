"""The secured stack for the security tests: Redis with ACL users over TLS, Kafka with
SASL_SSL (SCRAM-SHA-512) and ACLs (ops/secure.sh), on free ports in a folder of this
session's own; started on first use, stopped at the end. The plain stack is untouched.

Tests marked `secure` are the heavy ones (whole pipelines): they run with
`make test-secure` (ROUTER_TEST_SECURE=1) and are skipped by `make test`, which runs the
short ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ops.harness.stack.securestack import SecureStack
from tests.fixtures.private import heavy_only_with, private_servers

pytest_collection_modifyitems = heavy_only_with(
    "secure", "ROUTER_TEST_SECURE", "heavy security test: run by make test-secure"
)


@pytest.fixture(scope="session")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    yield from private_servers(
        SecureStack.private, "secure.sh", tmp_path_factory, "secured stack", start=False
    )


@pytest.fixture(scope="session")
def secure_redis(secure_stack: SecureStack) -> SecureStack:
    secure_stack.up("redis-up")
    return secure_stack


@pytest.fixture(scope="session")
def secure_kafka(secure_stack: SecureStack) -> SecureStack:
    secure_stack.up("kafka-up")
    return secure_stack
