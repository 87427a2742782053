"""A pure harness for the waiting room (no Kafka, no Redis): one send side whose table
is the model, whose room is a list of fake records, and whose drain is the real drain
step. Used by the adversarial-review tests of whole-group delivery."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from router import contract
from router.config import RouterSettings
from router.contract import events, schemas
from router.table.model import TableModel
from router.table.routing import STOPPED, RoomState
from router.topology.side import side_spec
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.drain.step import Drain
from router.unit.steps.emit.emitter import Emitter
from router.unit.steps.emit.records import Output
from router.unit.steps.route import request_for
from tests.unit.fakes import FakeMessage, msg

LEASE_MS = 15_000
WHOLE = [(contract.DELIVERY, b"complete")]
STRICT = [(contract.MESSAGE_TYPE, b"strict")]


def settings(bound: int) -> RouterSettings:
    return RouterSettings(
        topology={"name": "t"},  # type: ignore[arg-type]
        routing={  # type: ignore[arg-type]
            "busy_policy": "wait",
            "poison_policy_by_type": {"strict": "stop-group"},
            "ttl_by_type": {"strict": 60_000},
            "max_staged_messages": bound,
        },
    )


class ModelTable:
    def __init__(self, model: TableModel) -> None:
        self.model = model

    def room_state(self, gids: list[str]) -> dict[str, RoomState]:
        leased = {g for (g, _) in self.model.park_leases}
        return {
            g: RoomState(
                e.state, e.dest, e.closing, e.parks, g in leased, e.next, e.fence, e.origin
            )
            for g in gids
            if (e := self.model.entries.get(g)) is not None
        }


class FakeRoomConsumer:
    def __init__(self, side: Side) -> None:
        self.side = side

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.side.ends[tp.partition]) for tp in tps]

    def committed(self, tps: list[TopicPartition], *_: Any) -> list[TopicPartition]:
        """The send side's committed offsets (logical order's fence check)."""
        sources = self.side.committed
        return [
            TopicPartition(tp.topic, tp.partition, sources.get((tp.topic, tp.partition), -1001))
            for tp in tps
        ]

    def get_watermark_offsets(self, tp: TopicPartition, *_: Any) -> tuple[int, int]:
        return 0, self.side.ends[tp.partition]


class Side:
    """Route (model) -> emit -> room log -> drain, settled in the model; no I/O."""

    def __init__(self, dests: list[str], bound: int = 10_000) -> None:
        self.s = settings(bound)
        self.model = TableModel(dests, policy="wait", max_staged=bound)
        self.spec = side_spec(self.s, "send")
        self.emitter = Emitter(self.s, self.spec, "unit-1")
        self.topic = self.s.topology.room_topic("send")
        self.parts = self.s.routing.room_partitions
        self.log: dict[int, list[FakeMessage]] = {p: [] for p in range(self.parts)}
        self.ends: dict[int, int] = {p: 0 for p in range(self.parts)}
        self.drain = Drain(
            ModelTable(self.model),  # type: ignore[arg-type]
            self.spec,
            self.topic,
            self.parts,
            self.emitter,
            None,  # type: ignore[arg-type]
        )
        self.drain.consumer = FakeRoomConsumer(self)
        self.drain.assign([(self.topic, p) for p in range(self.parts)])
        self.n = 0
        self.delivered: list[tuple[str, bytes | None]] = []
        self.dead: list[tuple[bytes | None, bytes]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []  # committed events
        self.transactions: list[list[bytes | None]] = []  # delivered values per commit
        self.committed: dict[tuple[str, int], int] = {}  # source partition -> next offset

    def route(self, now: int, *messages: FakeMessage, commit: bool = True) -> list[str]:
        self.n += 1
        batch = Batch(f"b{self.n}", 0)
        Classifier(self.s, "send", {}).classify(batch, list(messages))
        items = [i for i in batch.items if i.routing is not None or i.bad is not None]
        reqs = [
            request_for(i, self.s.routing, f"{i.m.topic()}/{i.m.partition()}", False, True)
            for i in items
        ]
        res = self.model.route(reqs, now, batch=batch.id, lease_ms=LEASE_MS)
        for item, d in zip(items, res.decisions, strict=True):
            item.decision = d
        out = self.emitter.emit(batch, now)
        self._append(out, commit)
        if commit:
            for m in messages:
                tp = (m.topic(), m.partition())
                self.committed[tp] = max(self.committed.get(tp, 0), m.offset() + 1)
            self.model.settle(batch.id, sorted(out.ordinary_dests), out.finals)
            for g in out.stopped:
                self.model.release([(g, STOPPED)])
        return res.decisions

    def drain_batch(self, now: int, commit: bool = True) -> tuple[Batch, Output]:
        """The drain reads what is new in the room and writes one batch (committed or
        aborted); nothing is settled."""
        for p, records in self.log.items():
            for m in records:
                if self.drain.index.seen.get((self.topic, p), -1) < m.offset():
                    self.drain.take([m])
        self.n += 1
        batch = Batch(f"d{self.n}", 0)
        out = Output()
        self.drain.emit(batch, out, now)
        self._append(out, commit)
        return batch, out

    def run_drain(self, now: int) -> Output:
        batch, out = self.drain_batch(now)
        self.drain.settle(batch)
        self.model.settle(batch.id, [], out.finals, out.drains)
        return out

    def _append(self, out: Output, commit: bool) -> None:
        tx: list[bytes | None] = []
        for r in out.records:
            if r.topic == self.topic:
                p = r.partition
                if commit:
                    self.log[p].append(
                        FakeMessage(r.topic, p, self.ends[p], r.value, r.key, list(r.headers))
                    )
                self.ends[p] += 1
            elif not commit:
                continue
            elif r.topic == self.s.topology.dead_letter_topic:
                self.dead.append((r.key, dict(r.headers)["reason"]))
            elif r.topic == self.s.topology.events_topic:
                schema = dict(r.headers)[schemas.SCHEMA_HEADER].decode()
                self.events.append((schema, schemas.decode(schema, r.value)))
            elif r.value is not None:
                self.delivered.append((f"{r.topic}/{r.partition}", r.value))
                tx.append(r.value)
        if commit and tx:
            self.transactions.append(tx)
        if not commit:
            for p in {r.partition for r in out.records if r.topic == self.topic}:
                self.ends[p] += 1

    def aborted_events(self) -> list[dict[str, Any]]:
        return [e for s, e in self.events if s == events.GROUP_STAGING_ABORTED]


def whole(offset: int, gid: str, seq: int, final: bool = False, **kw: Any) -> FakeMessage:
    return msg(
        offset,
        gid,
        seq=seq,
        final=final,
        value=f"{gid}{seq}".encode(),
        extra=[*WHOLE, *kw.pop("extra", [])],
        **kw,
    )
