"""Lanes' home destinations (`router.table.choice.home`), on the pure model: under policy
`wait`, with at least as many lanes as destinations, each lane prefers its own among the
cheapest, so that one lane's ordinary messages do not fence the destination another lane's
next group needs (that group would wait in the room, and every later group behind it)."""

from __future__ import annotations

from router.config import RouterSettings
from router.table import choice
from router.table.model import TableModel
from router.table.routing import RouteRequest
from router.topology.side import homes

QUEUES = ["q0", "q1", "q2"]


def req(gid: str | None, lane: str, n: int, final: bool = False) -> RouteRequest:
    return RouteRequest(gid, final, 60_000, f"{lane}/{n}", lane)


def test_a_lanes_home_is_its_partition_among_its_cells_modulo_the_destinations() -> None:
    assert choice.home("t/5", 3, 0) is None  # off
    assert choice.home("t/5", 3, 1) == 2
    assert choice.home("t/0", 3, 1) == 0
    # three cells: cell 1 owns partitions 1, 4, 7, ...: the third of them is its index 2
    assert choice.home("t/7", 3, 3) == 2
    assert choice.home("t/7", 1, 3) == 0
    assert choice.home("pseudo", 3, 1) is None  # a lane that names no partition


def burst_start(homes: int) -> list[str]:
    """The start of a receive side under `wait`: the transfer partitions' first records, as
    three units read them: lane 1's ordinary messages and its first group (batch A, still
    committing), lane 0's first group (batch B), then lane 2's first group, one message,
    first and final (batch C)."""
    t = TableModel(QUEUES, policy="wait", homes=homes)
    a = t.route(
        [req(None, "t/1", 0), req(None, "t/1", 1), req("g1", "t/1", 2)], 0, batch="A"
    ).decisions
    b = t.route([req("g0", "t/0", 0)], 1, batch="B").decisions
    c = t.route([req("g2", "t/2", 0, final=True)], 2, batch="C").decisions
    return [*a, *b, *c]


def test_with_homes_no_lane_fences_another_lanes_next_group() -> None:
    assert burst_start(homes=1) == ["q1", "q1", "q1", "q0", "q2"]


def test_without_homes_the_same_start_parks_a_group() -> None:
    # by the cursor alone, lane 1's ordinary messages fence q0 and its group takes q1;
    # lane 0's group takes q2, and lane 2's finds every queue busy or fenced: it waits
    decisions = burst_start(homes=0)
    assert decisions[-1].startswith("!"), decisions
    assert all(not d.startswith("!") for d in decisions[:-1]), decisions


def test_a_home_is_only_a_preference_among_the_cheapest() -> None:
    t = TableModel(QUEUES, policy="wait", homes=1)
    assert t.route([req("g", "t/1", 0)], 0, batch="A").decisions == ["q1"]
    # lane 1's next group finds its home busy: it takes a clean one, never shares
    assert t.route([req("h", "t/1", 1)], 1, batch="A").decisions == ["q2"]
    # an ordinary message of lane 1: its home is busy, the cursor's first clean one
    assert t.route([req(None, "t/1", 2)], 2, batch="B").decisions == ["q0"]


def test_the_table_of_a_side_turns_homes_on_only_under_wait_with_enough_lanes() -> None:
    def settings(
        policy: str, receive_units: int, cells: int = 1, on: bool = True
    ) -> RouterSettings:
        return RouterSettings.model_validate(
            {
                "routing": {"busy_policy": policy, "lane_homes": on},
                "topology": {
                    "name": "h",
                    "receive_units": receive_units,
                    "receive_queues": ["r0", "r1", "r2"],
                    "cells": cells,
                },
            }
        )

    assert homes(settings("wait", 3), "receive") == 1
    assert homes(settings("wait", 12), "receive") == 1
    assert homes(settings("wait", 2), "receive") == 0  # fewer lanes than queues
    assert homes(settings("share", 12), "receive") == 0
    assert homes(settings("wait", 12, on=False), "receive") == 0  # routing.lane_homes
