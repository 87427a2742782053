"""The broken builds' runs (issue 32 item 5), through the short chaos and through targeted
scenarios: `make test-judge` (ROUTER_TEST_JUDGE=1) runs them all; `make test` only the
cheapest (the reordering build's chaos run, with no fault at all)."""

from __future__ import annotations

from tests.fixtures.private import heavy_only_with

pytest_collection_modifyitems = heavy_only_with(
    "judge", "ROUTER_TEST_JUDGE", "a broken build's run (a minute or more): run by make test-judge"
)
