"""The table gauges of a unit or the sweeper (`router.table.gauges.open_groups`), labelled by
side and cell: what they make of each table's load hash and room size (the tables here are
stand-ins answering as a `ManagementTable` does; the Redis calls are tested with the tables)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from router.metrics.prom import Gauges
from router.metrics.registry import Metrics
from router.table.gauges import open_groups


@dataclass
class Answers:
    destinations: tuple[str, ...]
    load: dict[str, int] = field(default_factory=dict)
    room: tuple[int, int | None, int] = (0, None, 0)

    def loads(self) -> dict[str, int]:
        return self.load

    def room_size(self) -> tuple[int, int | None, int]:
        return self.room


def test_each_cells_table_is_labelled_with_its_side_and_cell() -> None:
    cell0: Any = Answers(("0", "2"), {"0": 3})
    cell1: Any = Answers(("1", "3"), {"3": 1}, (2, 1_000, 4_000))
    gauges = Gauges()
    open_groups([("send", 0, cell0), ("send", 1, cell1)], Metrics())(gauges, True)
    assert gauges.values["open_groups"] == {
        ("send", "0", "0"): 3.0,
        ("send", "0", "2"): 0.0,
        ("send", "1", "1"): 0.0,
        ("send", "1", "3"): 1.0,
    }
    assert gauges.values["room_waiting"] == {("send", "0"): 0.0, ("send", "1"): 2.0}
    assert gauges.values["room_oldest_wait_seconds"] == {("send", "0"): 0.0, ("send", "1"): 3.0}


def test_a_mapping_of_sides_is_cell_0_and_nothing_is_kept_while_redis_is_away() -> None:
    gauges = Gauges()
    refresh = open_groups({"receive": Answers(("q",), {"q": 2})}, Metrics())  # type: ignore[dict-item]
    refresh(gauges, True)
    assert gauges.values["open_groups"] == {("receive", "0", "q"): 2.0}
    refresh(gauges, False)
    assert "open_groups" not in gauges.values and "room_waiting" not in gauges.values
