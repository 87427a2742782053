"""The table's part of settling a batch (`RoutingSteps.release`) runs on the session's
call thread right after the commit; the run loop's `settle` reports its outcome and runs
it itself when the commit did not. Pure logic: a table stand-in records the calls."""

from __future__ import annotations

from typing import Any, cast

import pytest
import redis

from router.metrics.registry import Metrics
from router.table.store.management import ManagementTable
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.emit.emitter import Emitter
from router.unit.steps.emit.records import Output
from router.unit.steps.pipeline import RoutingSteps
from router.unit.steps.route import TableRoute


class Table:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[tuple[str, list[str], list[tuple[str, str]]]] = []
        self.drains: list[tuple[Any, dict[str, str]]] = []  # (drains, their claims) per call
        self.fail = fail
        self.fenced: str | None = None  # the room lane a newer claim holds, if any
        self.last_fenced: str | None = None

    def settle(
        self,
        batch_id: str,
        dests: set[str],
        releases: list[tuple[str, str]],
        drains: Any,
        claims: dict[str, str],
    ) -> int:
        if self.fail is not None:
            raise self.fail
        self.calls.append((batch_id, sorted(dests), releases))
        self.drains.append((list(drains), dict(claims)))
        self.last_fenced = self.fenced if self.fenced in claims else None
        return len(releases)


def steps(table: Table, metrics: Metrics) -> RoutingSteps:
    return RoutingSteps(
        cast(Classifier, None),
        cast(TableRoute, None),
        cast(Emitter, None),
        cast(ManagementTable, table),
        metrics,
    )


def finished() -> tuple[Batch, Output]:
    out = Output()
    out.finals.append(("g", "t0"))
    out.ordinary_dests.add("q1")
    return Batch("u:1", 0), out


def test_released_after_the_commit_and_counted_once_by_settle() -> None:
    table, metrics = Table(), Metrics()
    s = steps(table, metrics)
    batch, out = finished()
    s.release(batch, out)  # as the call thread does, once committed
    assert table.calls == [("u:1", ["q1"], [("g", "t0")])]
    s.settle(batch, out)  # the run loop: reports it, does not release again
    assert len(table.calls) == 1
    assert metrics.get("released") == 1 and metrics.get("redis_round_trips") == 1
    assert "release" not in batch.extra


def test_the_drains_go_with_the_claims_they_were_drained_under() -> None:
    """The settle's drains are fenced by the unit's claims on their room lanes (a zombie's
    late settle opens nothing): the tokens travel with them."""
    table, metrics = Table(), Metrics()
    batch, out = finished()
    out.drains.append(("H", 1, -1))
    out.drain_claims["t.room.send/2"] = "7"
    steps(table, metrics).release(batch, out)
    assert table.drains == [([("H", 1, -1)], {"t.room.send/2": "7"})]


def test_fenced_drains_are_counted_and_their_lane_rechecked() -> None:
    """A settle whose drains another unit's claim fenced: counted like a fenced route call,
    and the lane goes to the claims' recheck (the coordinator is asked whether this member
    still holds it; if so it claims it back), so that a wrongly fenced owner does not leave
    its admitted groups unopened for good."""

    class Claims:
        def __init__(self) -> None:
            self.fenced_lanes: list[str] = []

        def fenced(self, lane: str) -> None:
            self.fenced_lanes.append(lane)

    table, metrics = Table(), Metrics()
    table.fenced = "t.room.send/2"
    s = steps(table, metrics)
    claims = Claims()
    s.claims = cast(Any, claims)
    batch, out = finished()
    out.drains.append(("H", 1, -1))
    out.drain_claims["t.room.send/2"] = "7"
    s.settle(batch, out)
    assert metrics.get("lanes_fenced") == 1
    assert claims.fenced_lanes == ["t.room.send/2"]
    assert metrics.get("released") == 1


def test_settle_releases_when_the_commit_did_not() -> None:
    table, metrics = Table(), Metrics()
    batch, out = finished()
    steps(table, metrics).settle(batch, out)
    assert table.calls == [("u:1", ["q1"], [("g", "t0")])]
    assert metrics.get("released") == 1


def test_redis_away_leaves_the_finals_to_the_sweeper_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    s = steps(Table(redis.ConnectionError("gone")), metrics)
    batch, out = finished()
    s.release(batch, out)  # never raises on the call thread
    s.settle(batch, out)
    assert metrics.get("redis_errors") == 1 and metrics.get("release_failures") == 1
    assert "left to the sweeper" in caplog.text


def test_a_defect_in_the_release_is_raised_on_the_run_loop() -> None:
    s = steps(Table(KeyError("bug")), Metrics())
    batch, out = finished()
    s.release(batch, out)
    with pytest.raises(KeyError):
        s.settle(batch, out)


def test_nothing_to_release_no_call() -> None:
    table = Table()
    s = steps(table, Metrics())
    batch = Batch("u:2", 0)
    s.release(batch, Output())
    s.settle(batch, Output())
    assert table.calls == []


def test_the_release_has_a_table_client_of_its_own() -> None:
    """On the call thread, the release writes through its own client, so that the run
    loop's replica WAIT runs on the connection of the loop's own writes."""
    loop, commit_thread = Table(), Table()
    s = RoutingSteps(
        cast(Classifier, None),
        cast(TableRoute, None),
        cast(Emitter, None),
        cast(ManagementTable, loop),
        Metrics(),
        release_table=cast(ManagementTable, commit_thread),
    )
    batch, out = finished()
    s.release(batch, out)
    s.settle(batch, out)
    assert loop.calls == [] and len(commit_thread.calls) == 1
