"""The broken builds' pure parts (ops/harness/breakage): without servers, and without
patching this process (the patches are applied only in the units a chaos run starts)."""

from __future__ import annotations

import sys

import pytest

from ops.harness.breakage import DEFECTS, command
from ops.harness.breakage.defects import LEASE_CHECKS, swap_first_two, without_lease_checks
from router.table.store.codec import script
from router.unit.steps.emit.records import Record


def rec(topic: str, value: str, partition: int = 0) -> Record:
    return Record(topic, partition, None, value.encode(), None, 0, None)


def test_the_command_runs_the_router_through_the_breakage_entry_point() -> None:
    assert command("reorder") == (sys.executable, "-m", "ops.harness.breakage", "reorder", "--")
    with pytest.raises(ValueError, match="unknown defect"):
        command("nothing-broken")


def test_every_defect_says_what_it_breaks_and_what_the_verdict_must_report() -> None:
    assert set(DEFECTS) >= {"fencing-off", "release-before-commit", "lease-ignored", "reorder"}
    assert all(d.guarantee and d.expected for d in DEFECTS.values())


def test_the_lease_checks_it_removes_are_in_the_table_scripts() -> None:
    """If route.lua or the prelude change, the broken build would silently be whole: the
    texts it removes must still be there (it refuses to start otherwise, too)."""
    route = script("route")
    for _, text, _ in LEASE_CHECKS:
        assert route.count(text) == 1, text
    broken = without_lease_checks(route)
    assert "fenced[d] = true end" in broken  # the statement stays, never reached
    assert all(text not in broken for _, text, _ in LEASE_CHECKS)
    assert without_lease_checks(script("settle")).count("leased[") < script("settle").count(
        "leased["
    )


def test_reorder_swaps_the_first_two_records_of_each_queue_only() -> None:
    records = [
        rec("room", "r1"),
        rec("q1", "a1"),
        rec("q1.p2", "b1"),
        rec("q2", "c1"),
        rec("q1", "a2"),
        rec("q1", "a3"),
        rec("q1.p2", "b2"),
    ]
    assert swap_first_two(records, {"q1", "q2"}) == 2
    assert [r.value.decode() for r in records if r.value] == [
        "r1", "a2", "b2", "c1", "a1", "a3", "b1",
    ]  # fmt: skip
    assert swap_first_two([rec("q1", "x")], {"q1"}) == 0
