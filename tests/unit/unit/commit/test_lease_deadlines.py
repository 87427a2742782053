"""When a batch must be on the broker by, and when it renews its leases (pure: a fake table
that records the renewals)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from router.metrics.registry import Metrics
from router.unit.commit.leases import LeaseLost, Leases
from router.unit.steps.batch import Batch


class FakeTable:
    lease_ms = 8_000

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.calls: list[tuple[Any, ...]] = []

    def renew(self, batch: str, dests: Any, parked: bool = False) -> bool:
        self.calls.append((batch, sorted(dests), parked))
        return self.answer


def routed(ago_s: float) -> Batch:
    batch = Batch("b1", 0)
    batch.routed_at = time.monotonic() - ago_s
    return batch


def test_a_batch_with_nothing_in_flight_and_nothing_parked_holds_no_lease() -> None:
    table = FakeTable()
    assert Leases(table, Metrics()).keep(routed(100), set(), parked=False) is None  # type: ignore[arg-type]
    assert table.calls == []


def test_a_parking_batch_has_an_append_deadline_and_renews_its_park_leases() -> None:
    table = FakeTable()
    leases = Leases(table, Metrics())  # type: ignore[arg-type]
    fresh = leases.keep(routed(0), set(), parked=True)
    assert fresh is not None and fresh > time.monotonic() and table.calls == []
    late = leases.keep(routed(6), {"d0"}, parked=True)  # past half its 8 s lease
    assert late is not None and late > time.monotonic() + 4
    assert table.calls == [("b1", ["d0"], True)]


def test_a_lapsed_park_lease_means_the_batch_is_not_produced() -> None:
    leases = Leases(FakeTable(answer=False), Metrics())  # type: ignore[arg-type]
    with pytest.raises(LeaseLost, match="lapsed"):
        leases.keep(routed(7), set(), parked=True)
