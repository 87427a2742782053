"""A unit's steps when its topology has several cells (docs/explanation/cells.md): one set
of steps per cell, each on its own cell's table, room partitions and destinations.

A polled batch is split by cell (the cell of a record is its partition modulo the cell
count: `router.topology.cells`); each cell's share is decided by that cell's steps on a
batch of its own (its route call, lane claims and drain), and their records are produced
together in the unit's one transaction, so exactly-once is unchanged. After the commit each
cell's share is released and settled by its own steps: one table call per cell that has
something to settle. With one cell the unit uses its single cell's steps directly
(`router.unit.steps.pipeline.routing_steps`): nothing here runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any, Protocol

from confluent_kafka import Message

from router.table.store.management import ManagementTable
from router.unit.steps.batch import TP, Batch
from router.unit.steps.drain.step import Drain
from router.unit.steps.emit.records import Output
from router.unit.steps.ownership import Held, LaneClaims

_SUBS = "cells"  # batch.extra: each cell's batch, in cell order
_OUTS = "cell_outputs"  # batch.extra: each cell's output, in cell order


class CellSteps(Protocol):
    """One cell's steps, as `router.unit.steps.pipeline.RoutingSteps` are."""

    @property
    def table(self) -> ManagementTable: ...
    @property
    def room(self) -> Drain | None: ...
    @property
    def claims(self) -> LaneClaims | None: ...
    def decide(self, batch: Batch, messages: list[Message]) -> None: ...
    def emit(self, batch: Batch, now_ms: int) -> Output: ...
    def release(self, batch: Batch, out: Output) -> None: ...
    def settle(self, batch: Batch, out: Output) -> None: ...
    def assigned(self, tps: list[TP]) -> None: ...
    def revoked(self, tps: list[TP]) -> None: ...


def by_cell(tps: Iterable[TP], cell: int, cells: int) -> list[TP]:
    return [tp for tp in tps if tp[1] % cells == cell]


def merge(outs: Sequence[Output]) -> Output:
    """One output of the cells' outputs, their records in cell order: counts summed, lists
    joined, sets and dicts united; barriers and the drain's start moved by the records before."""
    out = Output()
    for o in outs:
        base = len(out.records)
        for f in fields(Output):
            name, mine, theirs = f.name, getattr(out, f.name), getattr(o, f.name)
            if name == "barriers":
                mine.extend(b + base for b in theirs)
            elif name == "drain_from":
                if theirs >= 0 and mine < 0:
                    out.drain_from = base + theirs
            elif isinstance(mine, list):
                mine.extend(theirs)
            elif isinstance(mine, set):
                mine |= theirs
            elif isinstance(mine, dict):
                mine.update(theirs)
            else:
                setattr(out, name, mine + theirs)
    return out


def shares(batch: Batch) -> list[tuple[Batch, Output]]:
    """Each cell's batch and output, once emitted ([] before)."""
    return list(zip(batch.extra.get(_SUBS, ()), batch.extra.get(_OUTS, ()), strict=True))


class CellClaims:
    """The cells' lane claims, as the run loop sees them: it sets the coordinator's view."""

    def __init__(self, claims: list[LaneClaims]) -> None:
        self.cells = claims

    @property
    def held(self) -> Held | None:
        return self.cells[0].held

    @held.setter
    def held(self, held: Held | None) -> None:
        for c in self.cells:
            c.held = held


class CellRoom:
    """The cells' drains, as the run loop sees its waiting room: one room topic, each cell
    draining its own partitions of it."""

    def __init__(self, drains: list[Drain]) -> None:
        self.cells = drains
        self.topic = drains[0].topic

    @property
    def consumer(self) -> object:
        return self.cells[0].consumer

    @consumer.setter
    def consumer(self, consumer: object) -> None:
        for d in self.cells:
            d.consumer = consumer

    @property
    def eager(self) -> bool:
        return any(d.eager for d in self.cells)

    def busy(self) -> bool:
        return any(d.busy() for d in self.cells)

    def due(self) -> bool:
        return any([d.due() for d in self.cells])  # each cell's: each looks for its strays

    def reset(self) -> None:
        for d in self.cells:
            d.reset()

    def assign(self, tps: list[TP]) -> None:
        n = len(self.cells)
        for c, d in enumerate(self.cells):
            d.assign(by_cell(tps, c, n))

    def revoke(self, tps: list[TP]) -> None:
        n = len(self.cells)
        for c, d in enumerate(self.cells):
            d.revoke(by_cell(tps, c, n))


class CellRouting:
    """A unit's steps over several cells: each cell's share of a batch to its own steps."""

    def __init__(self, cells: list[Any]) -> None:
        self.cells: list[CellSteps] = cells
        rooms = [c.room for c in cells]
        self.room = CellRoom(rooms) if all(r is not None for r in rooms) else None
        self.tables = [c.table for c in cells]  # each cell's (the unit's table gauges)
        claims = [c.claims for c in cells]
        self.claims = CellClaims(claims) if all(c is not None for c in claims) else None
        # (gid, token) of a final of the batch emitted last -> its cell: the next batch
        # carries them (the finals of the batch in flight before it) to their cell's route call
        self._final_cell: dict[tuple[str, str], int] = {}

    def decide(self, batch: Batch, messages: list[Message]) -> None:
        n = len(self.cells)
        split: list[list[Message]] = [[] for _ in range(n)]
        for m in messages:
            split[m.partition() % n].append(m)
        subs: list[Batch] = []
        where = self._final_cell
        for c, steps in enumerate(self.cells):
            sub = Batch(batch.id, batch.generation, earlier=batch.earlier)
            sub.carried = [f for f in batch.carried if where.get(f) == c]
            sub.polled_ns = batch.polled_ns
            subs.append(sub)
            if batch.failure is None:
                steps.decide(sub, split[c])
                batch.failure = sub.failure
            else:  # a cell failed: the batch is rewound whole; the rest only tracked
                for m in split[c]:
                    sub.track(m)
            batch.items.extend(sub.items)
            batch.first.update(sub.first)
            batch.last.update(sub.last)
            batch.held_at.update(sub.held_at)
            batch.table_reset = batch.table_reset or sub.table_reset
            if sub.routed_at is not None:
                batch.routed_at = min(batch.routed_at or sub.routed_at, sub.routed_at)
        batch.extra[_SUBS] = subs

    def emit(self, batch: Batch, now_ms: int) -> Output:
        outs = [s.emit(sub, now_ms) for s, sub in zip(self.cells, batch.extra[_SUBS], strict=True)]
        self._final_cell = {final: c for c, o in enumerate(outs) for final in o.finals}
        batch.extra[_OUTS] = outs
        batch.room_offsets = [tp for sub in batch.extra[_SUBS] for tp in sub.room_offsets]
        return merge(outs)

    def release(self, batch: Batch, out: Output) -> None:
        for steps, (sub, o) in zip(self.cells, shares(batch), strict=False):
            steps.release(sub, o)

    def settle(self, batch: Batch, out: Output) -> None:
        for steps, (sub, o) in zip(self.cells, shares(batch), strict=False):
            steps.settle(sub, o)

    def assigned(self, tps: list[TP]) -> None:
        n = len(self.cells)
        for c, steps in enumerate(self.cells):
            steps.assigned(by_cell(tps, c, n))

    def revoked(self, tps: list[TP]) -> None:
        n = len(self.cells)
        for c, steps in enumerate(self.cells):
            steps.revoked(by_cell(tps, c, n))
