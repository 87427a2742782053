"""A unit's steps over several cells (`router.unit.steps.cells`), without servers: a batch is
split by the cell of each record's partition, each cell's share decided, emitted, released
and settled by that cell's steps alone (stand-ins record what each saw), and the unit sees one
batch and one output: items, offsets, held partitions, records, barriers and counts together.
With random batches, no cell's steps ever see another cell's record."""

from __future__ import annotations

import random
from typing import Any

import pytest

from router.unit.steps.batch import TP, Batch, Item
from router.unit.steps.cells import CellRoom, CellRouting, merge, shares
from router.unit.steps.emit.records import Output, Record
from tests.fixtures.fakes import msg


class Claims:
    def __init__(self) -> None:
        self.held: Any = None


class Room:
    def __init__(self) -> None:
        self.topic = "t.room.send"
        self.consumer: object = None
        self.eager = False
        self.assigned: list[TP] = []

    def busy(self) -> bool:
        return self.eager

    def due(self) -> bool:
        return self.eager

    def assign(self, tps: list[TP]) -> None:
        self.assigned += tps

    def revoke(self, tps: list[TP]) -> None:
        self.assigned = [tp for tp in self.assigned if tp not in tps]


class Cell:
    """One cell's steps: decides every message (held at `hold`), one record per item."""

    def __init__(self, cell: int, hold: TP | None = None, fail: str | None = None) -> None:
        self.cell, self.hold, self.fail = cell, hold, fail
        self.table = f"table-{cell}"
        self.room = Room()
        self.claims = Claims()
        self.seen: list[tuple[str, int]] = []
        self.carried: list[tuple[str, str]] = []
        self.released: list[Batch] = []
        self.settled: list[Batch] = []
        self.claimed: list[TP] = []

    def decide(self, batch: Batch, messages: list[Any]) -> None:
        self.carried += batch.carried
        for m in messages:
            tp = batch.track(m)
            self.seen.append(tp)
            batch.items.append(Item(m, None, None, decision=str(self.cell)))
            if tp == self.hold and tp not in batch.held_at:
                batch.held_at[tp] = m.offset()
        batch.routed_at = 100.0 - self.cell
        batch.failure = self.fail

    def emit(self, batch: Batch, now_ms: int) -> Output:
        out = Output()
        for item in batch.items:
            out.records.append(Record(f"dest-{self.cell}", 0, None, None, None, 0, None))
            out.forwarded += 1
            out.ordinary_dests.add(f"dest-{self.cell}")
            out.finals.append((f"g{item.m.offset()}", f"tok-{self.cell}"))
        out.barriers = [len(out.records)] if out.records else []
        batch.room_offsets = []
        return out

    def release(self, batch: Batch, out: Output) -> None:
        self.released.append(batch)

    def settle(self, batch: Batch, out: Output) -> None:
        self.settled.append(batch)

    def assigned(self, tps: list[TP]) -> None:
        self.claimed += tps

    def revoked(self, tps: list[TP]) -> None:
        self.claimed = [tp for tp in self.claimed if tp not in tps]


def cells(n: int, **kw: Any) -> tuple[CellRouting, list[Cell]]:
    parts = [Cell(c, **kw.get(str(c), {})) for c in range(n)]
    routing = CellRouting(parts)
    return routing, parts


def test_a_batch_is_split_by_cell_and_comes_back_whole() -> None:
    routing, parts = cells(3, **{"1": {"hold": ("q", 4)}})
    messages = [msg(o, topic="q", partition=p) for o in range(2) for p in range(6)]
    batch = Batch("b1", 0)
    routing.decide(batch, messages)  # type: ignore[arg-type]
    assert [sorted(set(p.seen)) for p in parts] == [
        [("q", 0), ("q", 3)],
        [("q", 1), ("q", 4)],
        [("q", 2), ("q", 5)],
    ]
    assert len(batch.items) == 12
    assert batch.first == {("q", p): 0 for p in range(6)}
    assert batch.last == {("q", p): 1 for p in range(6)}
    assert batch.held_at == {("q", 4): 0}
    assert batch.routed_at == 98.0  # the earliest table call: the leases count from it
    out = routing.emit(batch, 0)
    assert [r.topic for r in out.records] == ["dest-0"] * 4 + ["dest-1"] * 4 + ["dest-2"] * 4
    assert out.barriers == [4, 8, 12]
    assert out.forwarded == 12
    assert out.ordinary_dests == {"dest-0", "dest-1", "dest-2"}
    assert len(out.finals) == 12
    routing.release(batch, out)
    routing.settle(batch, out)
    for c, p in enumerate(parts):
        (sub,) = p.released
        assert p.settled == [sub]
        assert {(i.m.topic(), i.m.partition()) for i in sub.items} == set(p.seen)
        assert shares(batch)[c][0] is sub


def test_the_next_batch_carries_each_cell_its_own_finals() -> None:
    routing, parts = cells(2)
    first = Batch("b1", 0)
    routing.decide(first, [msg(7, topic="q", partition=0), msg(8, topic="q", partition=1)])  # type: ignore[list-item]
    out = routing.emit(first, 0)
    second = Batch("b2", 0, earlier=["b1"], carried=list(out.finals))
    routing.decide(second, [])
    assert parts[0].carried == [("g7", "tok-0")]
    assert parts[1].carried == [("g8", "tok-1")]


def test_a_failed_cell_fails_the_batch_and_the_rest_is_only_tracked() -> None:
    routing, parts = cells(3, **{"0": {"fail": "Redis unavailable"}})
    batch = Batch("b1", 0)
    routing.decide(batch, [msg(0, topic="q", partition=p) for p in range(3)])  # type: ignore[misc]
    assert batch.failure == "Redis unavailable"
    assert parts[1].seen == [] and parts[2].seen == []
    assert batch.first == {("q", 0): 0, ("q", 1): 0, ("q", 2): 0}  # rewound whole


def test_partitions_and_the_room_go_to_their_cells() -> None:
    routing, parts = cells(2)
    tps = [("q", 0), ("q", 1), ("q", 2), ("t.room.send", 3)]
    routing.assigned(tps)
    assert parts[0].claimed == [("q", 0), ("q", 2)]
    assert parts[1].claimed == [("q", 1), ("t.room.send", 3)]
    room = routing.room
    assert isinstance(room, CellRoom)
    room.assign(tps)
    assert parts[1].room.assigned == [("q", 1), ("t.room.send", 3)]
    room.consumer = "consumer"
    assert all(p.room.consumer == "consumer" for p in parts)
    assert not room.busy()
    parts[1].room.eager = True
    assert room.busy() and room.due() and room.eager
    assert routing.claims is not None
    routing.claims.held = "view"
    assert all(p.claims.held == "view" for p in parts)
    assert routing.tables == ["table-0", "table-1"]


@pytest.mark.parametrize("seed", range(20))
def test_no_cell_sees_another_cells_record(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(2, 5)
    routing, parts = cells(n)
    messages = [
        msg(o, topic=rnd.choice(["q1", "q2", "t.room.send"]), partition=rnd.randrange(12))
        for o in range(rnd.randint(0, 40))
    ]
    batch = Batch("b", 0)
    routing.decide(batch, messages)  # type: ignore[arg-type]
    for c, p in enumerate(parts):
        assert all(partition % n == c for _, partition in p.seen)
    assert sorted(id(i.m) for i in batch.items) == sorted(id(m) for m in messages)


def test_merged_counts_add_up() -> None:
    a, b = Output(forwarded=2, parked_in_room=1, drain_from=-1), Output(forwarded=3, drain_from=0)
    a.records = [Record("x", 0, None, None, None, 0, None)] * 2
    b.records = [Record("y", 0, None, None, None, 0, None)]
    merged = merge([a, b])
    assert (merged.forwarded, merged.parked_in_room, merged.drain_from) == (5, 1, 2)
    assert merged.consumed == a.consumed + b.consumed
