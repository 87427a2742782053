"""The waiting room's promise under random histories, on the pure room harness
(`tests/fixtures/roomharness.py`, `tests/fixtures/logical.py`): on a destination, nothing
is appended between a group's first and last record, a group's records come in its order,
and nothing is lost or written twice.

A driver takes a `Review` side with 1 to 3 destinations through a random sequence (one per
seed) of: route batches of three lanes (source partitions in/0..in/2) carrying streamed
groups' members (several groups open per lane), their finals and ordinary messages, some
batches aborted (their messages routed again, in order, from the lane's committed offset,
as the unit rewinds its sources); drain batches that commit and settle, that abort
(nothing written or settled, the drain keeps its state), or that commit but whose unit dies
before settling them; the drain's index rebuilt from the room's low marks (the same unit
rewinding, or a new owner taking the room partitions); and time jumps past the leases
(`LEASE_MS`: an aborted batch's leases end). Group IDs are mostly picked on the room
partition of two lanes' ordinary messages, so that drains chain lanes and groups behind
heads, and aborted chains are drained again.

At the end every open group gets its final, everything is routed and the room is drained
until quiet, and `side.delivered` alone is checked."""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from router.unit.steps.emit.records import Output
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.logical import Review, resolve_closing
from tests.fixtures.roomharness import LEASE_MS, WHOLE, Pending

PARTS = 4  # the default room partitions
LANES = 3
TOPIC = "in"
SEEDS = 300


def room_part(gid: str) -> int:
    return zlib.crc32(gid.encode()) % PARTS


class Always:
    def due(self, now: float | None = None) -> bool:
        return True


class Driven(Review):
    """A review side whose drain may also be replaced by a new owner's (a fresh `Drain`
    that rebuilds its index from the room's low marks), and whose looks for strays run at
    every batch (deterministic: the real step looks once a second)."""

    def __init__(self, dests: list[str]) -> None:
        super().__init__(dests)
        self._always_look()

    def _always_look(self) -> None:
        self.drain._strays = Always()  # type: ignore[assignment]

    def take_over(self) -> None:
        """The room partitions' next owner: a new drain step, nothing in memory."""
        drain = self.new_drain()
        self.drain = drain
        self._always_look()
        for tp, offset in self.room_committed.items():
            drain.index.seen[tp] = offset - 1


@dataclass
class Group:
    gid: str
    generation: int  # the ID's how manieth group
    whole: bool  # asks for whole delivery (`guarantee-delivery: complete`)
    seq: int = 0  # its next member's

    @property
    def name(self) -> str:
        return f"{self.gid}~{self.generation}"

    def member(self, offset: int, lane: int, final: bool) -> FakeMessage:
        value = f"{self.name}:{self.seq}".encode()
        self.seq += 1
        extra: list[tuple[str, bytes | None]] = list(WHOLE) if self.whole else []
        return msg(
            offset,
            self.gid,
            seq=self.seq - 1,
            final=final,
            partition=lane,
            value=value,
            extra=extra,
        )


@dataclass
class Lane:
    stream: list[FakeMessage] = field(default_factory=list)
    open: dict[str, Group] = field(default_factory=dict)


@dataclass
class Driver:
    rng: random.Random
    side: Driven
    focus: set[int]  # room partitions group IDs are picked on
    now: int = 1_000
    lanes: list[Lane] = field(default_factory=lambda: [Lane() for _ in range(LANES)])
    expected: dict[str, int] = field(default_factory=dict)  # group's name -> its members
    ordinary: set[bytes] = field(default_factory=set)
    reuse: float = 0.0  # how often a new group takes an ID whose old group ended
    n_groups: int = 0
    finished: dict[str, bytes | None] = field(default_factory=dict)  # ID -> its last final
    generation: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    closed: bool = False  # no new message: the lanes are routed to their end
    routing: list[tuple[Pending, set[int]]] = field(default_factory=list)  # batches open
    draining: Pending | None = None  # the drain batch open
    n_ordinary: int = 0
    log: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def tick(self, ms: int = 1) -> int:
        self.now += ms
        return self.now

    def new_gid(self) -> str:
        self.n_groups += 1
        base = f"G{self.n_groups}"
        if room_part(base) in self.focus:
            return base
        return next(f"{base}x{i}" for i in range(1_000) if room_part(f"{base}x{i}") in self.focus)

    def produce(self, lane: int, finish: bool = False) -> None:
        """One more message on the lane's source partition: a member of one of its open
        groups (maybe its final), a new group's first member (now and then under an ID
        that finished, or asking for whole delivery), or an ordinary message."""
        ln = self.lanes[lane]
        offset = len(ln.stream)
        r = self.rng.random()
        if finish or (ln.open and r < 0.55):
            gid = self.rng.choice(sorted(ln.open))
            group = ln.open[gid]
            final = finish or self.rng.random() < 0.3
            m = group.member(offset, lane, final)
            if final:
                del ln.open[gid]
                self.expected[group.name] = group.seq
                self.finished[gid] = m.value()
        elif r < 0.8 and sum(len(x.open) for x in self.lanes) < 6:
            gid = ""
            if self.finished and self.rng.random() < self.reuse:  # the ID reused: a new group
                # once its old group's final is delivered: before, the new group's first
                # message could be HELD behind an old group that waits for a destination
                # held by a group of its own lane, and the harness has no hold timeout
                delivered = {v for _, v in self.side.delivered}
                live = {g for x in self.lanes for g in x.open}
                done = [
                    g for g, last in self.finished.items() if last in delivered and g not in live
                ]
                gid = self.rng.choice(done) if done else ""
            gid = gid or self.new_gid()
            self.generation[gid] += 1
            group = Group(gid, self.generation[gid], self.rng.random() < 0.2)
            final = self.rng.random() < 0.15
            m = group.member(offset, lane, final)
            self.finished.pop(gid, None)
            if final:
                self.expected[group.name] = 1
                self.finished[gid] = m.value()
            else:
                ln.open[gid] = group
        else:
            self.n_ordinary += 1
            value = f"o{self.n_ordinary}".encode()
            self.ordinary.add(value)
            m = msg(offset, None, partition=lane, value=value)
        ln.stream.append(m)

    def cursor(self, lane: int) -> int:
        """Where the lane's next batch starts: its committed offset (an aborted or held
        batch's messages are read again, in order)."""
        return self.side.committed.get((TOPIC, lane), 0)

    def route(self, lanes: list[int] | None = None, most: int = 4) -> None:
        """A route batch over lanes with no batch open (a lane's batches are one unit's,
        one after the other): closed at once, or left open while others run."""
        busy = {lane for _, ls in self.routing for lane in ls}
        per_lane: dict[int, list[FakeMessage]] = {}
        for lane in lanes if lanes is not None else range(LANES):
            if lane in busy or (lanes is None and self.rng.random() < 0.4):
                continue
            start = self.cursor(lane)
            k = self.rng.randint(1, most)
            while not self.closed and len(self.lanes[lane].stream) < start + k:
                self.produce(lane)
            if self.lanes[lane].stream[start : start + k]:
                per_lane[lane] = self.lanes[lane].stream[start : start + k]
        queues = [list(q) for q in per_lane.values()]
        batch: list[FakeMessage] = []
        while any(queues):  # the lanes mixed, each in offset order
            q = self.rng.choice([q for q in queues if q])
            batch.append(q.pop(0))
        if not batch:
            return
        pending = self.side.route_open(self.tick(), *batch)
        self.log.append(
            f"route {pending.batch.id}: "
            + " ".join(
                f"{(i.m.value() or b'').decode()}@{i.m.partition()}->{i.decision}"
                for i in pending.batch.items
            )
        )
        self.routing.append((pending, set(per_lane)))
        if lanes is not None or self.rng.random() < 0.7:
            self.close_route(len(self.routing) - 1, lanes is not None)

    def close_route(self, at: int | None = None, commit_only: bool = False) -> None:
        if not self.routing:
            return
        if at is None:
            at = self.rng.randrange(len(self.routing))
        pending, _ = self.routing.pop(at)
        r = 0.0 if commit_only else self.rng.random()
        how = "commit" if r < 0.75 else "abort" if r < 0.93 else "commit, unit dies"
        self.log.append(f"route {pending.batch.id} {how}")
        self.side.route_close(pending, how != "abort", how == "commit")
        self.stats[f"route {how}"] += 1

    def open_drain(self) -> None:
        if self.draining is not None:
            return
        self.draining = self.side.drain_open(self.tick())
        self.log.append(f"drain {self.draining.batch.id}: {self._values(self.draining.out)}")
        self.stats["chained"] += self.draining.out.chained

    def close_drain(self, how: str = "") -> None:
        """The drain batch commits and settles, aborts (the drain keeps its state), or
        commits and its unit dies before the settle (a new owner rebuilds)."""
        if self.draining is None:
            return
        pending, self.draining = self.draining, None
        if not how:  # a chain's batch aborts more often: its replay is what is looked at
            r = self.rng.random()
            commits = 0.45 if pending.out.chained else 0.65
            how = "commit" if r < commits else "abort" if r < 0.9 else "commit, unit dies"
        self.log.append(f"drain {pending.batch.id} {how}")
        self.side.drain_close(pending, how != "abort", how == "commit")
        self.stats[f"drain {how}"] += 1
        if how == "abort" and pending.out.chained:
            self.stats["chain aborted"] += 1
            if self.rng.random() < 0.5:
                self.rebuild()
        if how == "commit, unit dies":
            self.side.take_over()

    def drain(self) -> None:
        self.open_drain()
        self.close_drain("commit")

    def rebuild(self) -> None:
        """The drain's unit rewinds (its pending batch aborted), or a new owner takes the
        room partitions (the old one's pending batch fenced: aborted)."""
        if self.draining is not None:
            self.close_drain("abort")
        if self.rng.random() < 0.5:
            self.log.append("rebuild (reset)")
            self.side.rebuild()
        else:
            self.log.append("rebuild (new owner)")
            self.side.take_over()
        self.stats["rebuild"] += 1

    def leases_end(self) -> None:
        """Time passes the leases: a route batch still open cannot renew them and is
        rewound (`router/table/store/lua/lease.lua`)."""
        while self.routing:
            pending, _ = self.routing.pop()
            self.log.append(f"route {pending.batch.id} abort (leases lost)")
            self.side.route_close(pending, False)
        self.log.append("leases end")  # a drain batch holds no lease: it may still commit
        self.side.model.route([], self.tick(LEASE_MS + 100), batch="tick")
        self.stats["leases end"] += 1

    def sweep(self) -> None:
        self.log.append("sweeper: closing entries resolved")
        resolve_closing(self.side)
        self.stats["sweep"] += 1

    def _values(self, out: Output) -> str:
        topic = self.side.topic
        return " ".join(
            f"{(r.value or b'').decode()}>{r.partition}"
            for r in out.records
            if r.topic != topic and r.value is not None
        )

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.35:
            self.route()
        elif r < 0.50:
            self.close_route()
        elif r < 0.70:
            self.open_drain()
        elif r < 0.88:
            self.close_drain()
        elif r < 0.93:
            self.rebuild()
        elif r < 0.96:
            self.sweep()
        else:
            self.leases_end()

    def finish(self) -> None:
        """Every open group ends, everything is routed, the room drains until quiet."""
        while self.routing:
            self.close_route(0)
        self.close_drain()
        for lane, ln in enumerate(self.lanes):
            while ln.open:
                self.produce(lane, finish=True)
        self.closed = True
        for _ in range(200):
            pending = [
                lane for lane in range(LANES) if self.cursor(lane) < len(self.lanes[lane].stream)
            ]
            if not pending:
                break
            self.route(lanes=pending, most=8)
            self.open_drain()
            self.close_drain()  # still aborted at times
            if self.rng.random() < 0.2:
                self.leases_end()
                self.sweep()  # the finals of a batch whose unit died before its settle
        else:
            raise AssertionError("the lanes were never routed to their end")
        for _ in range(6):
            self.open_drain()
            self.close_drain()
        for _ in range(4):
            for _ in range(6):
                self.drain()
            self.leases_end()
            self.sweep()
        for _ in range(6):
            self.drain()


def check(d: Driver) -> None:
    """From `side.delivered` alone: each group whole, in order, contiguous on one
    destination; every ordinary message once."""
    side = d.side
    seen: dict[bytes, int] = defaultdict(int)
    on: dict[str, list[bytes]] = defaultdict(list)
    for dest, value in side.delivered:
        assert value is not None
        seen[value] += 1
        on[dest].append(value)
    twice = sorted(v for v, n in seen.items() if n > 1)
    assert not twice, f"delivered twice: {twice}"
    assert not side.dead_values, f"dead-lettered: {side.dead_values}"
    got_ordinary = {v for v in seen if not v.startswith(b"G")}
    assert got_ordinary == d.ordinary, f"ordinary lost: {sorted(d.ordinary - got_ordinary)}"
    got_members = {v for v in seen if v.startswith(b"G")}
    members = {f"{g}:{s}".encode() for g, n in d.expected.items() for s in range(n)}
    assert got_members == members, f"members lost: {sorted(members - got_members)}"
    for name, n in d.expected.items():
        key = name.encode() + b":"
        dests = {dest for dest, vs in on.items() if any(v.startswith(key) for v in vs)}
        assert len(dests) == 1, f"{name} on destinations {sorted(dests)}"
        values = on[dests.pop()]
        at = [i for i, v in enumerate(values) if v.startswith(key)]
        mine = [values[i] for i in at]
        assert mine == [f"{name}:{s}".encode() for s in range(n)], f"{name}: {mine}"
        span = values[at[0] : at[-1] + 1]
        assert len(span) == len(at), f"{name} interleaved: {span}"
    assert not side.model.entries, f"left in the table: {side.model.entries}"


def run(seed: int, steps: int = 120, reuse: float = 0.0) -> Driver:
    rng = random.Random(seed)
    dests = ["0", "1", "2"][: rng.randint(1, 3)]
    lanes_part = {room_part(f"~{TOPIC}/{p}") for p in range(LANES)}
    focus = set(lanes_part) if rng.random() < 0.75 else set(range(PARTS))
    d = Driver(rng, Driven(dests), focus, reuse=reuse)
    for _ in range(steps):
        d.step()
    d.finish()
    return d


@pytest.mark.parametrize("block", range(10))
def test_random_histories_keep_groups_whole_in_order_and_contiguous(block: int) -> None:
    for seed in range(block * SEEDS // 10, (block + 1) * SEEDS // 10):
        d = run(seed)
        try:
            check(d)
        except AssertionError as exc:
            history = "\n".join(d.log)
            raise AssertionError(f"seed {seed}: {exc}\n{history}") from exc


@pytest.mark.parametrize("block", range(4))
def test_random_histories_with_ids_reused_keep_groups_contiguous(block: int) -> None:
    """Senders reuse IDs whose finals were delivered (15 % of new groups)."""
    for seed in range(block * SEEDS // 4, (block + 1) * SEEDS // 4):
        d = run(seed, reuse=0.15)
        try:
            check(d)
        except AssertionError as exc:
            history = "\n".join(d.log)
            raise AssertionError(f"seed {seed}, IDs reused: {exc}\n{history}") from exc


@pytest.mark.parametrize("seed", [102, 190])
def test_ids_reused_after_a_chain_whose_settle_was_lost(seed: int) -> None:
    """Found with IDs reused (reuse 0.15), an interleaving until 2026-12-01. Seed 190: a
    chain batch (d26: G3, G4x4, G7x0, G8, G11, G17x0, G18 to destination 0) commits and its
    unit dies before the settle. The new owner finds them admitted with nothing in the room
    (strays) and its checks open them: seven entries OPEN on destination 0, each closing,
    until the sweeper's `_resolve_closing` releases them. A sender reused two of those IDs
    (their finals delivered), and each new group went straight to destination 0 (an open
    closing entry takes the ID's next message): G4x4~2 and G11~2 open on one destination at
    once, G11~2 inside G4x4~2's span. Seed 102: ordinary messages inside G1~2's span the
    same way. Now a reused ID waits for its old group's release while another group is in
    charge of the destination (`router.table.room.crowds`)."""
    check(run(seed, 120, reuse=0.15))
