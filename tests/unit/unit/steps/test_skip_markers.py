"""Adversarial review of skip markers (`router/unit/steps/emit/markers.py`,
docs/explanation/routing.md "Group end" item 7): a member the send side does not forward while its
group goes on is followed on its transfer partition by a `router-control: skip` record, which the
receive side routes as that member and forwards nowhere.

On pure logic only: two hops (send side -> transfer log -> receive side), each with its
table as the model, the real classify, route, emit and drain steps and its own waiting
room as a list of fake records; transactions commit or abort, and the receive side reads
the transfer log in whatever slices a test chooses. No Kafka, no Redis. Judged from what
the hops write to the receive queues, the dead-letter topic and the events topic, per
committed transaction. Defects found are fixed (DEFECT, now fixed) or strict xfails."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from router import contract
from router.config import RouterSettings
from router.contract import events, lifetime, schemas
from router.metrics.registry import Metrics
from router.receiver.received import Gatherer, Received
from router.state import groups as groupstatus
from router.table import room
from router.table.model import TableModel
from router.table.routing import STOPPED, RoomState, updated_at
from router.topology.side import side_spec
from router.unit.steps import classify
from router.unit.steps.batch import Batch
from router.unit.steps.drain.step import Drain
from router.unit.steps.emit.emitter import Emitter
from router.unit.steps.emit.records import Output, Record
from router.unit.steps.holds import Holds
from router.unit.steps.route import TableRoute
from router.utils.faults import Faults
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.roomharness import LEASE_MS, FakeRoomConsumer

T0 = 1_700_000_000_000  # the fake messages' CreateTime
Headers = list[tuple[str, bytes | None]]
BAD = [(lifetime.LIFETIME_MS, b"soon")]  # bad-lifetime: dead-lettered, its group goes on
SKIP = [(lifetime.ON_EXPIRY, b"skip")]
WHOLE = [(contract.DELIVERY, b"complete")]
STREAM = [(contract.DELIVERY, b"stream")]
LOGICAL = [(contract.ORDER, b"logical")]


def expired_at(instant: int) -> Headers:
    return [(lifetime.EXPIRES_AT, str(instant).encode()), *SKIP]


def settings(policy: str = "share", transfer: int = 2, **routing: Any) -> RouterSettings:
    """Two receive queues, `transfer` transfer partitions."""
    return RouterSettings(
        topology={"name": "t", "receive_units": transfer, "receive_queue_count": 2},  # type: ignore[arg-type]
        routing={"busy_policy": policy, **routing},  # type: ignore[arg-type]
    )


def member(
    offset: int,
    gid: str,
    seq: int | None,
    final: bool = False,
    extra: Headers = (),  # type: ignore[assignment]
    value: bytes | None = None,
    **kw: Any,
) -> FakeMessage:
    value = value or f"{gid}{seq}".encode()
    return msg(offset, gid, seq=seq, final=final, value=value, extra=list(extra), **kw)


class _Table:
    """What the route and drain steps ask of their table, answered by the hop's model."""

    epoch, resets = "e", 0

    def __init__(self, hop: Hop) -> None:
        self.hop = hop
        self.claims: dict[str, str] = {}  # the model fences nothing: no claims

    def route(self, requests: list[Any], batch: str, carried: Any = (), earlier: Any = ()) -> Any:
        hop = self.hop
        return hop.model.route(
            requests, hop.now, batch=batch, lease_ms=LEASE_MS, carried=carried, earlier=earlier
        )

    def admitted(self) -> dict[str, str]:
        return {g: e.dest for g, e in self.hop.model.entries.items() if e.state == room.ADMITTED}

    def room_state(self, gids: list[str]) -> dict[str, RoomState]:
        model = self.hop.model
        leased = {g for (g, _) in model.park_leases}
        return {
            g: RoomState(
                e.state, e.dest, e.closing, e.parks, g in leased, e.next, e.fence, e.origin
            )
            for g in gids
            if (e := model.entries.get(g)) is not None
        }


class Hop:
    """One side: classify -> route (the real step, on the model) -> emit, plus its
    waiting room (a fake log) and the real drain step; a batch commits or aborts, and a
    committed one is settled in the model (what the unit's settle call does)."""

    def __init__(self, side: str, s: RouterSettings) -> None:
        self.side, self.s = side, s
        self.spec = side_spec(s, side)  # type: ignore[arg-type]
        r = s.routing
        self.model = TableModel(
            list(self.spec.destinations), policy=r.busy_policy, max_staged=r.max_staged_messages
        )
        self.emitter = Emitter(s, self.spec, f"{side}-unit")
        self.metrics = Metrics()
        table = _Table(self)
        self.route_step = TableRoute(
            table,  # type: ignore[arg-type]
            r,
            self.metrics,
            Holds(1.0, 10.0),
            Faults(),
            side == "send",
        )
        self.room_topic = s.topology.room_topic(side)
        parts = r.room_partitions
        self.log: dict[int, list[FakeMessage]] = {p: [] for p in range(parts)}
        self.ends: dict[int, int] = {p: 0 for p in range(parts)}
        self.committed: dict[tuple[str, int], int] = {}  # for the logical order fence
        self.drain = Drain(
            table,  # type: ignore[arg-type]
            self.spec,
            self.room_topic,
            parts,
            self.emitter,
            self.metrics,
            r.gap_timeout_ms,
            r.gap_policy,
        )
        self.drain.consumer = FakeRoomConsumer(self)  # type: ignore[arg-type]
        self.drain.assign([(self.room_topic, p) for p in range(parts)])
        self.now = 0
        self.n = 0
        self.outs: list[Output] = []

    def route(self, now: int, messages: list[FakeMessage]) -> tuple[Batch, Output]:
        self.n += 1
        self.now = now
        batch = Batch(f"{self.side}{self.n}", 0)
        classifier = classify.Classifier(self.s, self.side, {})  # type: ignore[arg-type]
        classifier.clock_ms = lambda: now
        classifier.classify(batch, messages)
        self.route_step.route(batch)
        assert batch.failure is None
        return batch, self.emitter.emit(batch, now)

    def drain_batch(self, now: int) -> tuple[Batch, Output]:
        self.n += 1
        self.now = now
        for p, records in self.log.items():
            for m in records:
                if self.drain.index.seen.get((self.room_topic, p), -1) < m.offset():
                    self.drain.take([m])
        batch = Batch(f"{self.side}-d{self.n}", 0)
        out = Output()
        self.drain.emit(batch, out, now)
        return batch, out

    def append_room(self, out: Output, commit: bool) -> None:
        for r in out.records:
            if r.topic == self.room_topic:
                p = r.partition
                if commit:
                    self.log[p].append(
                        FakeMessage(r.topic, p, self.ends[p], r.value, r.key, list(r.headers))
                    )
                self.ends[p] += 1
        if not commit:  # the abort marker takes an offset
            for p in {r.partition for r in out.records if r.topic == self.room_topic}:
                self.ends[p] += 1

    def settle(self, batch: Batch, out: Output, sources: Iterable[FakeMessage] = ()) -> None:
        for m in sources:
            tp = (m.topic(), m.partition())
            self.committed[tp] = max(self.committed.get(tp, 0), m.offset() + 1)
        self.drain.settle(batch)
        self.model.settle(batch.id, sorted(out.ordinary_dests), out.finals, out.drains)
        for g in out.stopped:
            self.model.release([(g, STOPPED)])
        self.outs.append(out)

    def count(self, name: str) -> int:
        return sum(int(getattr(o, name)) for o in self.outs)


class Pipe:
    """A send hop and a receive hop; what the send side commits to the transfer topic is
    the receive side's input, read in the slices a test asks for."""

    def __init__(self, s: RouterSettings) -> None:
        self.s = s
        self.send = Hop("send", s)
        self.receive = Hop("receive", s)
        self.transfer: dict[int, list[FakeMessage]] = {}  # committed records, by partition
        self.transfer_ends: dict[int, int] = {}
        self.read: dict[int, int] = {}  # the receive side's position per transfer partition
        self.queues: dict[str, list[bytes | None]] = {}  # receive queue -> values
        self.transactions: list[list[tuple[str, bytes | None]]] = []  # receive-side writes
        self.dead: list[dict[str, Any]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    # --- the send side

    def send_batch(self, now: int, *messages: FakeMessage, commit: bool = True) -> Output:
        batch, out = self.send.route(now, list(messages))
        self._commit(self.send, batch, out, commit, messages)
        return out

    def send_drain(self, now: int, commit: bool = True) -> Output:
        batch, out = self.send.drain_batch(now)
        self._commit(self.send, batch, out, commit, ())
        return out

    # --- the receive side

    def pending(self) -> list[FakeMessage]:
        """Committed transfer records the receive side has not read yet, in order."""
        return [
            m
            for p in sorted(self.transfer)
            for m in self.transfer[p]
            if m.offset() >= self.read.get(p, 0)
        ]

    def receive_batch(self, now: int, limit: int | None = None, commit: bool = True) -> Output:
        todo = self.pending()[:limit]
        batch, out = self.receive.route(now, todo)
        self._commit(self.receive, batch, out, commit, todo)
        if commit:
            for m in todo:
                self.read[m.partition()] = m.offset() + 1
        return out

    def receive_drain(self, now: int, commit: bool = True) -> Output:
        batch, out = self.receive.drain_batch(now)
        self._commit(self.receive, batch, out, commit, ())
        return out

    def flow(self, now: int, rounds: int = 4) -> None:
        """Everything pending through both sides (drains included), a few rounds."""
        for k in range(rounds):
            self.send_drain(now + k)
            if self.pending():
                self.receive_batch(now + k)
            self.receive_drain(now + k)

    # --- bookkeeping

    def _commit(
        self, hop: Hop, batch: Batch, out: Output, commit: bool, sources: Iterable[FakeMessage]
    ) -> None:
        hop.append_room(out, commit)
        t = self.s.topology
        written: list[tuple[str, bytes | None]] = []
        for r in out.records:
            if r.topic == t.transfer_topic:
                end = self.transfer_ends.get(r.partition, 0)
                self.transfer_ends[r.partition] = end + 1
                if commit:
                    self.transfer.setdefault(r.partition, []).append(_fake(r, end))
            elif not commit or r.topic == hop.room_topic:
                continue
            elif r.topic == t.dead_letter_topic:
                self.dead.append(schemas.decode(events.DEAD_LETTER, r.value))
            elif r.topic == t.events_topic:
                schema = dict(r.headers)[schemas.SCHEMA_HEADER].decode()
                self.events.append((schema, schemas.decode(schema, r.value)))
            else:
                assert r.topic in t.receive_queues, r.topic
                assert not any(k == contract.CONTROL for k, _ in r.headers or []), r
                self.queues.setdefault(r.topic, []).append(r.value)
                written.append((r.topic, r.value))
        if not commit:
            for p in {r.partition for r in out.records if r.topic == t.transfer_topic}:
                self.transfer_ends[p] += 1  # the abort marker
            return
        if written:
            self.transactions.append(written)
        hop.settle(batch, out, sources)

    def markers(self, kind: bytes = contract.SKIP) -> list[FakeMessage]:
        """The committed control records of `kind` on the transfer topic."""
        return [
            m
            for ms in self.transfer.values()
            for m in ms
            if dict(m.headers() or []).get(contract.CONTROL) == kind
        ]

    def values(self) -> list[bytes | None]:
        return [v for vs in self.queues.values() for v in vs]

    def queue_of(self, gid: str) -> list[bytes | None]:
        """The one receive queue holding `gid`'s members, in order (only its members)."""
        holding = [
            [v for v in vs if v is not None and v.decode().startswith(gid)]
            for vs in self.queues.values()
        ]
        holding = [vs for vs in holding if vs]
        assert len(holding) == 1, f"group {gid!r} on {len(holding)} queues: {self.queues}"
        return holding[0]

    def expired(self) -> list[dict[str, Any]]:
        return [e for s, e in self.events if s == events.EXPIRED_MESSAGE]

    def reasons(self) -> list[str]:
        return [d["reason_code"] for d in self.dead]

    def released(self) -> bool:
        """Nothing left in either table: every group's entry released."""
        return all(
            not h.model.entries and not h.model.load and not h.model.room
            for h in (self.send, self.receive)
        )


def _fake(r: Record, offset: int) -> FakeMessage:
    ts = (1, r.timestamp) if r.timestamp else (1, T0)
    return FakeMessage(r.topic, r.partition, offset, r.value, r.key, list(r.headers), ts)


def gap_records(p: Pipe, gid: str) -> list[tuple[str, int | None]]:
    """Where each skipped member of `gid` is reported: (reason, seq) from its dead letter
    (the original headers) or its ExpiredMessage event."""
    out: list[tuple[str, int | None]] = []
    for d in p.dead:
        headers = {h["key"]: h["value"] for h in d["headers"]}
        if headers.get(contract.GUARANTEE_ID) == gid.encode():
            raw = headers.get(contract.SEQ)
            out.append((d["reason_code"], int(raw) if raw else None))
    out += [("expired", e["seq"]) for e in p.expired() if e["guarantee_id"] == gid]
    return sorted(out, key=lambda x: (x[1] is None, x[1] or 0))


TTL_1H = [(contract.TTL_MS, b"3600000")]


# ---------------------------------------------------------------- (a) defects, fixed


def test_a_whole_group_whose_first_member_is_skipped_is_one_write_on_the_receive_side() -> None:
    """DEFECT, now fixed (router/unit/steps/emit/markers.py). A group asking for whole-group
    delivery by its
    header (`guarantee-delivery: complete`; the default is `stream`), whose first member
    is dead-lettered: the send side stages it and, at its final, writes the skip marker
    and the rest to one transfer partition in one transaction. The marker carried the
    group ID and seq only, so the receive side, where it is the group's first record,
    opened the group *streamed*: a receive unit whose batch ends inside the group wrote
    W1 in one transaction and W2, W3 in another (a read_committed receiver saw part of a
    whole group). The marker now carries the member's delivery."""
    p = Pipe(settings("wait"))
    p.send_batch(T0, member(0, "W", 0, extra=[*WHOLE, *BAD]), member(1, "W", 1, extra=WHOLE))
    p.send_batch(T0 + 1, member(2, "W", 2, extra=WHOLE), member(3, "W", 3, final=True, extra=WHOLE))
    for k in range(3):
        p.send_drain(T0 + 10 + k)
    assert len(p.markers()) == 1 and sum(map(len, p.transfer.values())) == 4
    p.receive_batch(T0 + 20, limit=2)  # the receive unit's batch ends after W1
    assert p.values() == []  # staged: nothing of W is written before its final
    p.receive_batch(T0 + 21)
    for k in range(3):
        p.receive_drain(T0 + 30 + k)
    assert p.queue_of("W") == [b"W1", b"W2", b"W3"]
    assert [[v for _, v in tx] for tx in p.transactions] == [[b"W1", b"W2", b"W3"]]
    assert p.reasons() == ["bad-lifetime"] and p.released()


def test_a_streamed_group_whose_first_member_is_skipped_is_not_staged_downstream() -> None:
    """DEFECT, now fixed (router/unit/steps/emit/markers.py): the other way round. Under
    `default_delivery = "complete"` a group that asks for `guarantee-delivery: stream` and
    whose first member is dead-lettered was opened on the receive side by a marker
    without the header, that is *staged*: S1 was held in the receive side's room until
    the group's final (which may come hours later), where the send side streamed it."""
    p = Pipe(settings("wait", default_delivery="complete"))
    p.send_batch(T0, member(0, "S", 0, extra=[*STREAM, *BAD]), member(1, "S", 1, extra=STREAM))
    p.flow(T0 + 10)
    assert p.queue_of("S") == [b"S1"]  # delivered as it came, the final not sent yet
    p.send_batch(T0 + 100, member(2, "S", 2, final=True, extra=STREAM))
    p.flow(T0 + 110)
    assert p.queue_of("S") == [b"S1", b"S2"] and p.released()


def test_a_skip_marker_out_of_the_room_keeps_its_groups_ttl_downstream() -> None:
    """DEFECT, now fixed (router/unit/steps/emit/markers.py). A member skipped out of the send
    side's
    waiting room (here a group in logical order, whose member came from another
    partition, so it went through the room) was written as a marker from the parked
    record, whose routing was not read: the marker had no `guarantee-ttl-ms`. The
    receive side, routing it as the group's member, set the entry's TTL to the
    *default* (5 min) instead of the group's (1 h). The sender pausing 10 min (well
    within its TTL) then lost its group on the receive side: the entry swept, the next
    member a continuation without an entry, dead-lettered as group-entry-missing."""
    p = Pipe(settings("share", default_ttl_ms=300_000))
    g = [*LOGICAL, *TTL_1H]
    p.send_batch(T0, member(0, "G", 0, extra=g))
    p.send_batch(T0 + 1, member(1, "G", 1, extra=[*g, *BAD], partition=1))
    p.flow(T0 + 10)
    (marker,) = p.markers()
    assert dict(marker.headers() or [])[contract.TTL_MS] == b"3600000"
    pause = T0 + 10 + 600_000  # 10 min: past the default TTL, well within the group's
    assert [s.guarantee_id for s in p.receive.model.sweep(pause)] == []
    assert [s.guarantee_id for s in p.send.model.sweep(pause)] == []
    p.send_batch(pause, member(2, "G", 2, final=True, extra=g))
    p.flow(pause + 10)
    assert p.queue_of("G") == [b"G0", b"G2"]
    assert gap_records(p, "G") == [("bad-lifetime", 1)] and p.released()


def test_a_skip_marker_of_a_logical_group_is_no_orphan_where_its_member_would_not_be() -> None:
    """DEFECT, now fixed (router/unit/steps/emit/markers.py): a metric that lied. On the receive
    side a member of a group in logical order (`guarantee-order: logical`) with a number > 0 and no
    entry starts the group (the send side may have gone past a gap at its start); its marker had no
    `guarantee-order` header, so it was taken for a continuation without an entry: the table
    answered ORPHAN and counted it in `orphans` (an operator's sign of lost table entries), for a
    group delivered whole."""
    p = Pipe(settings("share", gap_timeout_ms=100, gap_policy="deliver"))
    p.send_batch(
        T0, member(2, "L", 2, extra=LOGICAL), member(1, "L", 1, extra=[*LOGICAL, *BAD])
    )  # seq 0 never comes: the send side goes past the gap, the marker first downstream
    p.send_batch(T0 + 1, member(3, "L", 3, final=True, extra=LOGICAL))
    p.flow(T0 + 10)  # the gap at number 0 is seen
    assert p.values() == []
    p.flow(T0 + 1_000)  # ... and given up on (gap policy deliver)
    assert p.queue_of("L") == [b"L2", b"L3"]
    assert p.receive.metrics.get("orphans") == 0
    assert p.receive.count("skips") == 1 and p.send.count("skip_markers") == 1
    assert p.released()


# ---------------------------------------------------------------- (b) exactly once


def test_an_aborted_batch_with_a_skip_marker_writes_it_once_at_its_replay() -> None:
    """The marker, the dead letter and the source offsets are one transaction: an abort
    (a unit killed before its commit, a failed commit) loses all three, the replay (the
    table already has the entry its first attempt created) writes each once."""
    p = Pipe(settings())
    first = [member(0, "g", 0, extra=BAD), member(1, "g", 1)]
    assert p.send_batch(T0, *first, commit=False).skip_markers == 1  # aborted
    assert p.markers() == [] and p.dead == [] and "g" in p.send.model.entries
    p.send_batch(T0 + 1, *first)
    p.send_batch(T0 + 2, member(2, "g", 2, extra=BAD), member(3, "g", 3, final=True))
    # the receive side's first batch (the marker opens the group) aborts too
    assert p.receive_batch(T0 + 3, limit=2, commit=False).skips == 1
    assert p.values() == [] and "g" in p.receive.model.entries
    p.flow(T0 + 4)
    assert p.queue_of("g") == [b"g1", b"g3"]
    assert [dict(m.headers() or [])[contract.SEQ] for m in p.markers()] == [b"0", b"2"]
    assert gap_records(p, "g") == [("bad-lifetime", 0), ("bad-lifetime", 2)]
    assert p.released()


def test_an_aborted_drain_writes_the_marker_of_a_parked_member_once() -> None:
    p = Pipe(settings("wait"))
    p.send_batch(T0, member(0, "A", 0))  # A and B hold both transfer partitions
    p.send_batch(T0, member(0, "B", 0, partition=1))
    p.send_batch(T0 + 1, member(1, "G", 0, extra=BAD), member(2, "G", 1))  # G waits
    p.send_batch(T0 + 2, member(3, "A", 1, final=True))
    aborted = p.send_drain(T0 + 3, commit=False)  # G admitted; its drain aborts
    assert aborted.skip_markers == 1 and aborted.dead == 1
    assert p.markers() == [] and p.dead == []
    p.flow(T0 + 4)
    p.send_batch(T0 + 10, member(4, "G", 2, final=True), member(1, "B", 1, final=True, partition=1))
    p.flow(T0 + 11)
    assert p.queue_of("G") == [b"G1", b"G2"]
    assert len(p.markers()) == 1 and gap_records(p, "G") == [("bad-lifetime", 0)]
    assert p.released()


# ---------------------------------------------------------------- (c) the receive side's room


def test_a_marker_that_opens_a_waiting_group_downstream_waits_in_its_place() -> None:
    """Policy wait on the receive side, every receive queue busy: the marker, first of
    its group there, is parked (the group waits), the members behind it too; once a
    queue frees, the group is drained in order and the marker writes nothing."""
    p = Pipe(settings("wait", transfer=4))
    p.send_batch(T0, member(0, "A", 0), member(1, "B", 0))
    p.flow(T0 + 1)
    assert len(p.queues) == 2  # A and B hold both receive queues
    p.send_batch(T0 + 2, member(2, "G", 0, extra=BAD), member(3, "G", 1))
    p.flow(T0 + 3)
    assert p.receive.model.entries["G"].state == room.WAITING
    p.send_batch(T0 + 4, member(4, "G", 2, extra=BAD), member(5, "A", 1, final=True))
    p.flow(T0 + 5)
    p.send_batch(T0 + 6, member(6, "G", 3, final=True), member(7, "B", 1, final=True))
    p.flow(T0 + 7)
    assert p.queue_of("G") == [b"G1", b"G3"]
    assert len(p.markers()) == 2 and p.receive.count("skips") == 2
    assert p.receive.count("parked_in_room") >= 3 and p.released()


def test_a_staged_group_downstream_whose_first_member_is_skipped_is_one_write() -> None:
    p = Pipe(settings("wait", default_delivery="complete"))
    p.send_batch(T0, member(0, "W", 0, extra=BAD), member(1, "W", 1))
    p.send_batch(T0 + 1, member(2, "W", 2, extra=BAD), member(3, "W", 3, final=True))
    for k in range(3):
        p.send_drain(T0 + 2 + k)
    for _ in range(4):  # the receive side reads one record per batch
        p.receive_batch(T0 + 10, limit=1)
    for k in range(3):
        p.receive_drain(T0 + 20 + k)
    assert [[v for _, v in tx] for tx in p.transactions] == [[b"W1", b"W3"]]
    assert p.released()


def test_a_marker_waiting_downstream_when_its_group_is_swept_is_not_dead_lettered() -> None:
    """The receive side's entry of a waiting group is swept (its TTL, the sender gone):
    its parked members are dead-lettered (`group-entry-missing`), never its marker, whose
    member was dead-lettered upstream already (one record per member)."""
    p = Pipe(settings("wait", transfer=4, default_ttl_ms=60_000))
    p.send_batch(T0, member(0, "A", 0), member(1, "B", 0))
    p.flow(T0 + 1)
    p.send_batch(T0 + 2, member(2, "G", 0, extra=BAD), member(3, "G", 1))
    p.flow(T0 + 3)
    assert p.receive.count("parked_in_room") == 2  # the marker and G1
    later = T0 + 120_000
    swept = {s.guarantee_id for s in p.receive.model.sweep(later)}
    assert "G" in swept
    p.flow(later)
    assert gap_records(p, "G") == [("bad-lifetime", 0), ("group-entry-missing", 1)]
    assert sorted(p.values()) == [b"A0", b"B0"]


# ---------------------------------------------------------------- (d) group ends and TTLs


def test_a_whole_group_whose_first_and_final_members_are_skipped_downstream() -> None:
    """Whole-group delivery by header, first and final members skipped: the send side
    writes a skip marker, the rest and a close marker in one go; the receive side stages
    the group from the skip marker to the close marker and writes the rest in one
    transaction, then releases it."""
    p = Pipe(settings("wait"))
    p.send_batch(
        T0,
        member(0, "W", 0, extra=[*WHOLE, *BAD]),
        member(1, "W", 1, extra=WHOLE),
        member(2, "W", 2, extra=WHOLE),
        member(3, "W", 3, final=True, extra=[*WHOLE, *BAD]),
    )
    for k in range(3):
        p.send_drain(T0 + 1 + k)
    for _ in range(4):
        p.receive_batch(T0 + 10, limit=1)
    for k in range(3):
        p.receive_drain(T0 + 20 + k)
    assert [[v for _, v in tx] for tx in p.transactions] == [[b"W1", b"W2"]]
    assert len(p.markers()) == 1 and len(p.markers(contract.CLOSE)) == 1
    assert p.released()


def test_a_group_opened_downstream_by_a_skip_marker_and_then_stopped_is_released() -> None:
    """Member 0 dead-lettered (its group goes on: a skip marker opens it downstream),
    member 2 poison under stop-group: the close marker releases what the skip marker
    opened, on both sides; member 3 is parked as group-stopped."""
    p = Pipe(settings())
    stop = [(contract.ON_POISON, b"stop-group"), (contract.SEQ, b"x")]
    p.send_batch(
        T0,
        member(0, "g", 0, extra=BAD),
        member(1, "g", 1),
        msg(2, None, value=b"g2", headers=[*contract.headers_for("g"), *stop]),
        member(3, "g", 3, final=True),
    )
    p.flow(T0 + 1)
    assert p.queue_of("g") == [b"g1"]
    assert len(p.markers()) == 1 and len(p.markers(contract.CLOSE)) == 1
    assert sorted(p.reasons()) == ["bad-lifetime", "bad-seq", "group-stopped"]
    assert "g" not in p.receive.model.entries and p.receive.model.load == {}


def test_a_skipped_final_is_a_close_marker_and_ends_the_group_on_both_sides() -> None:
    p = Pipe(settings())
    p.send_batch(T0, member(0, "g", 0), member(1, "g", 1, final=True, extra=BAD))
    p.flow(T0 + 1)
    assert p.markers() == [] and len(p.markers(contract.CLOSE)) == 1
    assert p.queue_of("g") == [b"g0"] and p.released()


@pytest.mark.parametrize(
    ("skipped", "delivered"),
    [
        ({1, 2}, [b"g0", b"g3"]),  # two in a row
        ({0, 1, 2}, [b"g3"]),  # every member but the final
        ({0, 1, 2, 3}, []),  # every member, the final too: markers, then a close marker
    ],
)
def test_runs_of_skipped_members(skipped: set[int], delivered: list[bytes]) -> None:
    p = Pipe(settings())
    p.send_batch(
        T0,
        *(member(k, "g", k, final=k == 3, extra=BAD if k in skipped else ()) for k in range(4)),
    )
    p.flow(T0 + 1)
    assert [v for v in p.values() if v and v.startswith(b"g")] == delivered
    assert len(p.markers()) == len(skipped - {3})
    assert [s for _, s in gap_records(p, "g")] == sorted(skipped)
    assert p.released()


def test_a_group_whose_only_member_is_skipped_is_swept_at_its_ttl_on_both_sides() -> None:
    """Its sender went away after one (skipped) member: the marker opened the group on
    the receive side, which holds a queue for it until its TTL, like any group whose
    sender died; nothing is dead-lettered for the marker."""
    p = Pipe(settings(default_ttl_ms=60_000))
    p.send_batch(T0, member(0, "g", 0, extra=BAD))
    p.flow(T0 + 1)
    assert "g" in p.receive.model.entries and p.values() == []
    later = updated_at(T0 + 1, 60_000) + 60_001  # past the deadline
    assert [s.guarantee_id for s in p.send.model.sweep(later)] == ["g"]
    assert [s.guarantee_id for s in p.receive.model.sweep(later)] == ["g"]
    assert p.reasons() == ["bad-lifetime"] and p.released()


def test_a_marker_after_its_groups_entry_expired_downstream_is_ignored() -> None:
    """The receive side swept the group (its entry idle past its TTL there) and the
    send side still had it: a marker numbered > 0 is then a continuation without an
    entry, like its member would be; it writes nothing (its member is dead-lettered
    upstream), and the group's next members are dead-lettered `group-entry-missing` as
    they were before markers (docs/explanation/routing.md, "TTL"). Unnumbered, the marker opens the
    group again there, and the rest follows it."""
    p = Pipe(settings(default_ttl_ms=60_000))
    p.send_batch(T0, member(0, "n", 0), member(1, "u", None, value=b"u-first"))
    p.flow(T0 + 1)
    later = updated_at(T0 + 1, 60_000) + 60_001  # past the deadline
    assert sorted(s.guarantee_id for s in p.receive.model.sweep(later)) == ["n", "u"]
    p.send_batch(later, member(2, "n", 1, extra=BAD), member(3, "u", None, extra=BAD))
    p.send_batch(
        later + 1, member(4, "n", 2, final=True), member(5, "u", None, True, value=b"u-last")
    )
    p.flow(later + 2)
    assert gap_records(p, "n") == [("bad-lifetime", 1), ("group-entry-missing", 2)]
    assert gap_records(p, "u") == [("bad-lifetime", None)]
    assert p.queue_of("n") == [b"n0"]
    assert sorted(p.values()) == [b"n0", b"u-first", b"u-last"]
    assert p.receive.metrics.get("orphans") == 2  # n's marker and n2
    assert p.released()


# ---------------------------------------------------------------- (e) logical order, gaps


def test_a_skipped_member_of_a_logical_group_out_of_order_fills_its_number() -> None:
    """Logical order: members 3, 1 (expired), 2, 0 arrive; the send side drains them in
    sequence with the marker in member 1's place, and the receive side, which gets
    each group in order from one transfer partition, never waits for number 1."""
    p = Pipe(settings())
    p.send_batch(
        T0 + 10,
        member(0, "L", 3, final=True, extra=LOGICAL),
        member(1, "L", 1, extra=[*LOGICAL, *expired_at(T0 + 5)]),
        member(2, "L", 2, extra=LOGICAL, partition=1),
        member(3, "L", 0, extra=LOGICAL),
    )
    p.flow(T0 + 20)
    assert p.queue_of("L") == [b"L0", b"L2", b"L3"]
    assert [dict(m.headers() or [])[contract.SEQ] for m in p.markers()] == [b"1"]
    assert gap_records(p, "L") == [("expired", 1)]
    assert p.released()


def test_every_skipped_member_is_reported_once_with_its_group_and_number() -> None:
    """The gap a skipped member leaves is visible where the router reports: its dead
    letter (the original headers, guarantee-seq included) or its ExpiredMessage event
    (`guarantee_id`, `seq`, `on_expiry`), one record per member, whatever path it took
    (straight, out of the room)."""
    p = Pipe(settings("wait"))
    p.send_batch(T0, member(0, "A", 0), member(1, "B", 0, partition=1))
    p.send_batch(
        T0 + 10,
        member(2, "g", 0),
        member(3, "g", 1, extra=expired_at(T0 + 5)),  # expired when routed
        member(4, "g", 2, extra=expired_at(T0 + 50)),  # expires in the room
        member(5, "g", 3, extra=BAD),
        member(6, "g", 4, final=True),
    )
    p.send_batch(T0 + 60, member(7, "A", 1, final=True))
    p.flow(T0 + 70)
    p.send_batch(T0 + 80, member(2, "B", 1, final=True, partition=1))
    p.flow(T0 + 90)
    assert p.queue_of("g") == [b"g0", b"g4"]
    assert gap_records(p, "g") == [("expired", 1), ("expired", 2), ("bad-lifetime", 3)]
    assert {e["on_expiry"] for e in p.expired() if e["guarantee_id"] == "g"} == {"SKIP"}
    assert len(p.markers()) == 3 and p.released()


# ---------------------------------------------------------------- (f) the receiver library


def received(offset: int, gid: str, seq: int, final: bool = False) -> Received:
    value = f"{gid}{seq}".encode()
    return Received("q", 0, offset, None, value, [], None, gid, final, seq)


def test_a_receivers_group_status_goes_past_a_skipped_number() -> None:
    """`router.state.groups`: a gap in the numbers (a member skipped upstream) neither
    stops the status nor makes a later member look like a replay."""
    status = None
    for offset, seq, final in ((0, 0, False), (1, 2, False), (2, 3, True)):
        status = groupstatus.advance(status, "g", "q", 0, offset, seq, final)
        assert status is not None
    assert status is not None
    assert (status.last_seq, status.complete, status.done_count) == (3, True, 3)


def test_a_receiver_labels_groups_with_a_skipped_member_alike() -> None:
    gather = Gatherer()
    for m in (received(0, "a", 0), received(1, "a", 2), received(2, "a", 3, final=True)):
        gather.add(m, 0.0)
    for m in (received(3, "b", 1), received(4, "b", 2, final=True)):
        gather.add(m, 0.0)
    middle, first = gather.next_ready(0.0, 60.0), gather.next_ready(0.0, 60.0)
    assert middle is not None and first is not None
    assert [m.seq for m in middle.messages] == [0, 2, 3]
    assert [m.seq for m in first.messages] == [1, 2]
    assert middle.complete == first.complete  # fixed: neither is whole, and each says why
    assert (middle.complete, middle.missing_seqs, first.missing_seqs) == (False, (1,), (0,))
