"""Cells (issue 30, item 3; docs/explanation/cells.md), without servers: the setting and its
checks, the cell of a partition, a cell's destinations, room partitions and table keys, and
that one cell (the default) is today's layout, key for key."""

from __future__ import annotations

import pytest
import redis
from pydantic import ValidationError

from router.config import RouterSettings
from router.errors import ConfigError
from router.security.redis import key_patterns
from router.table.store.management import TableKeys
from router.topology import cells
from router.topology.side import side_spec, table_for


def settings(**topology: object) -> RouterSettings:
    room = topology.pop("room_partitions", 4)
    return RouterSettings(topology={"name": "cellt", **topology}, routing={"room_partitions": room})


def three() -> RouterSettings:
    return settings(
        cells=3, send_queue_partitions=4, receive_units=7, receive_queue_count=5, room_partitions=6
    )


def test_one_cell_is_the_default_and_keeps_every_key() -> None:
    s = settings()
    assert s.topology.cells == 1
    client = redis.Redis()  # never connected: building a table sends nothing
    for side in ("send", "receive"):
        table = table_for(s, side, client)
        assert table.keys == TableKeys.of("router", "cellt", side)
        assert table.keys.entries == f"router:{{cellt:{side}}}:entries"
    assert side_spec(s, "send").destinations == ("0", "1", "2")
    assert side_spec(s, "receive").destinations == ("cellt.recv.1", "cellt.recv.2", "cellt.recv.3")
    assert cells.room_partitions(s) == [0, 1, 2, 3]
    assert cells.source_partitions(s, "send") == [0, 1, 2]


def test_a_cell_owns_every_kind_modulo_the_count() -> None:
    s = three()
    assert [cells.cell_of(p, 3) for p in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [cells.destinations(s, "send", c) for c in cells.all_cells(s)] == [
        ("0", "3", "6"),
        ("1", "4"),
        ("2", "5"),
    ]
    assert [cells.destinations(s, "receive", c) for c in range(3)] == [
        ("cellt.recv.1", "cellt.recv.4"),
        ("cellt.recv.2", "cellt.recv.5"),
        ("cellt.recv.3",),
    ]
    assert [cells.room_partitions(s, c) for c in range(3)] == [[0, 3], [1, 4], [2, 5]]
    assert [cells.source_partitions(s, "send", c) for c in range(3)] == [[0, 3], [1], [2]]
    assert [cells.source_partitions(s, "receive", c) for c in range(3)] == [
        [0, 3, 6],
        [1, 4],
        [2, 5],
    ]
    # disjoint and complete: every destination in exactly one cell
    for side in ("send", "receive"):
        names = [d for c in range(3) for d in cells.destinations(s, side, c)]
        assert sorted(names) == sorted(side_spec(settings(**_same_counts()), side).destinations)
    # the source partition's cell routes to a transfer partition of the same cell, whose
    # number is again the cell of the receive side's source partition
    for p in range(4):
        assert all(
            cells.cell_of(int(t), 3) == cells.cell_of(p, 3)
            for t in cells.destinations(s, "send", p % 3)
        )


def _same_counts() -> dict[str, object]:
    return {"send_queue_partitions": 4, "receive_units": 7, "receive_queue_count": 5}


def test_each_cell_has_its_own_keys_and_slot_tag() -> None:
    s = three()
    client = redis.Redis()
    tables = [table_for(s, "send", client, c) for c in range(3)]
    assert [t.keys.entries for t in tables] == [
        "router:{cellt:send}:entries",
        "router:{cellt/1:send}:entries",
        "router:{cellt/2:send}:entries",
    ]
    assert [t.destinations for t in tables] == [["0", "3", "6"], ["1", "4"], ["2", "5"]]
    receive = table_for(s, "receive", client, 2)
    assert receive.keys.owners == "router:{cellt/2:receive}:owners"
    assert receive.destinations == ["cellt.recv.3"]
    assert side_spec(s, "receive", 1).sources == side_spec(s, "receive", 0).sources
    # no cell: every destination of the side (what a unit, the relay and the harness see)
    assert side_spec(s, "send").destinations == tuple(str(t) for t in range(7))
    assert len(side_spec(s, "receive").destinations) == 5
    assert cells.tag("cellt") == "cellt"
    assert cells.tag("cellt", 4) == "cellt/4"


def test_a_cell_that_does_not_exist_is_refused() -> None:
    s = three()
    with pytest.raises(ConfigError, match=r"cell 3 does not exist: topology.cells = 3 \(0..2\)"):
        side_spec(s, "send", 3)
    with pytest.raises(ConfigError, match="cell -1 does not exist"):
        cells.tag("cellt", -1)


@pytest.mark.parametrize(
    ("overrides", "short"),
    [
        (
            {"send_queue_partitions": 2},
            r"send-queue partitions \(topology.send_queue_partitions = 2\)",
        ),
        ({"receive_units": 2}, r"transfer partitions \(topology.receive_units = 2\)"),
        ({"receive_queue_count": 1}, r"receive queues \(topology receive queues = 1\)"),
        ({"room_partitions": 2}, r"room partitions \(routing.room_partitions = 2\)"),
    ],
)
def test_every_cell_needs_one_of_each_kind(overrides: dict[str, object], short: str) -> None:
    counts: dict[str, object] = {
        "send_queue_partitions": 3, "receive_units": 3, "receive_queue_count": 3,
        "room_partitions": 3, **overrides,
    }  # fmt: skip
    # a ConfigError, wrapped by pydantic (`load_settings` raises it as a ConfigError)
    with pytest.raises(
        ValidationError, match=rf"topology.cells = 3 needs at least 3 .*too few {short}"
    ):
        settings(cells=3, **counts)
    if overrides != {"receive_queue_count": 1}:
        settings(cells=2, **counts)  # two cells fit in two of each


def test_units_refuse_replica_acks_on_a_cluster_with_several_cells() -> None:
    cluster = {"cluster_nodes": ["127.0.0.1:7000"], "min_replica_acks": 1}
    cells.units_can_route(settings())  # one cell: nothing to refuse
    s = RouterSettings(
        topology={"name": "cellt", "cells": 2},
        redis=cluster,
        routing={"room_partitions": 4},
    )
    with pytest.raises(ConfigError, match=r"not built yet for redis\.min_replica_acks"):
        cells.units_can_route(s)


def test_the_cell_of_a_destination() -> None:
    s = three()
    assert [cells.cell_of_destination(s, "send", str(t)) for t in range(7)] == [0, 1, 2] * 2 + [0]
    assert cells.cell_of_destination(s, "send", "7") is None
    assert cells.cell_of_destination(s, "send", "x") is None
    assert cells.cell_of_destination(s, "receive", "cellt.recv.5") == 1
    assert cells.cell_of_destination(s, "receive", "nowhere") is None


def test_a_group_parks_in_a_room_partition_of_its_cell() -> None:
    s = three()
    for c in range(3):
        parts = cells.room_partitions(s, c)
        assert {cells.room_partition(f"g{i}", parts) for i in range(100)} == set(parts)
    # one cell: the same partition as a count gives (today's)
    assert all(
        cells.room_partition(f"g{i}", [0, 1, 2, 3]) == cells.room_partition(f"g{i}", 4)
        for i in range(100)
    )


def test_the_acl_covers_every_cells_tables() -> None:
    assert key_patterns(settings()) == [
        "router:{cellt:send}:*",
        "router:{cellt:receive}:*",
        "router:metrics:cellt:*",
    ]
    assert key_patterns(three())[:6] == [
        "router:{cellt:send}:*",
        "router:{cellt:receive}:*",
        "router:{cellt/1:send}:*",
        "router:{cellt/1:receive}:*",
        "router:{cellt/2:send}:*",
        "router:{cellt/2:receive}:*",
    ]


def test_several_cells_never_deliver_past_a_gap() -> None:
    with pytest.raises(ValidationError, match=r"cells = 3 needs routing.gap_policy = \"park\""):
        RouterSettings(
            topology={"name": "cellt", "cells": 3},
            routing={"room_partitions": 4, "gap_policy": "deliver"},
        )
    RouterSettings(topology={"name": "cellt"}, routing={"gap_policy": "deliver"})  # one cell
