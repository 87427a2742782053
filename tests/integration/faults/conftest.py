"""Fault kinds of issue 32 whose runs take minutes together (about 5 on 2026-12-02): they
run with `make test-faults` (ROUTER_TEST_FAULTS=1) and are skipped by `make test`, whose
time they would break; shorter forms of several run there (`test_zombie_fence`,
`test_net_chaos`, the short chaos runs' broker restart). Each test says what it found."""

from __future__ import annotations

from tests.fixtures.private import heavy_only_with

pytest_collection_modifyitems = heavy_only_with(
    "faults", "ROUTER_TEST_FAULTS", "a long fault run (issue 32): run by make test-faults"
)
