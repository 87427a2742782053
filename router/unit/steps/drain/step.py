"""The drain step: forward the parked messages of admitted groups out of the waiting room
(`docs/explanation/waiting-room.md`). Room records come with the unit's sources (one consumer
group: it says who drains which room partition and fences a unit that lost one) into a
`RoomIndex`; each batch forwards the admitted groups' undrained records to their reserved
destination with a drain marker, in the batch's transaction, and commits the room's low
mark. A group opens (`router.table.room.drained`) only once the step read past the room's end
offset taken when no park of the group was in flight."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis
from confluent_kafka import KafkaException, Message, TopicPartition

from router.backends.kafka.endoffsets import Watermarks
from router.metrics.registry import Metrics
from router.table import room
from router.table.routing import NO_DEST, STOPPED
from router.table.store.management import ManagementTable
from router.topology.cells import room_partition
from router.topology.side import SideSpec
from router.unit.steps.batch import TP, Batch
from router.unit.steps.drain import chained, chaining, checks
from router.unit.steps.drain import writes as drainwrite
from router.unit.steps.drain.checks import Check
from router.unit.steps.drain.index import RoomIndex
from router.unit.steps.drain.logical import LogicalOrder
from router.unit.steps.drain.positions import Positions
from router.unit.steps.emit.emitter import Emitter
from router.unit.steps.emit.records import Output
from router.unit.steps.ownership import LaneClaims, Unclaimed, lane_of
from router.utils.clock import Every

log = logging.getLogger("router.drain")

IDLE_S = 0.05  # between two batches that only drain
STRAYS_S = 1.0  # between two looks for admitted groups the room holds no record of


class Drain:
    """The drain step of one unit (its Kafka consumer is the unit's source consumer)."""

    def __init__(
        self,
        table: ManagementTable,
        spec: SideSpec,
        room_topic: str,
        partitions: int | Sequence[int],  # a count, or the unit's cell's room partitions
        emitter: Emitter,
        metrics: Metrics,
        gap_timeout_ms: int = 30_000,
        gap_policy: str = "park",
        ends: Watermarks | None = None,
    ) -> None:
        self.table, self.spec, self.topic, self.metrics = table, spec, room_topic, metrics
        self.partitions, self.emitter = partitions, emitter
        self.logical = LogicalOrder(gap_timeout_ms, gap_policy)
        self.index = RoomIndex()
        self.checks: dict[str, Check] = {}
        self.opening: set[str] = set()  # drained here, not yet open or released
        # Room partition -> the end offset to read up to before draining from it (None: to
        # be read): a new owner, or one that rewound, must see every drain marker already
        # committed, or it would forward a group's records again.
        self.catch_up: dict[TP, int | None] = {}
        self._idle = Every(IDLE_S)
        self.eager = False  # the last drain did something: its settle may admit more
        self.consumer: object = None  # set by the unit: position() and watermarks
        self.owned: set[TP] = set()
        # on the owned room partitions, read or not yet; their starts asked as their ends
        self.positions = Positions(ends.starts if ends is not None else None)
        # Room partitions' end offsets (`router.backends.kafka.endoffsets`, one request on a
        # connection of its own); without, the consumer's watermarks, about 0.5 s apiece behind its
        # fetch long-poll. Asked at most once per batch, after the room states were read.
        self.ends = ends
        self._ends_now: dict[TP, int] | None = None
        self.claims: LaneClaims | None = None  # the unit's claims: chains are fenced
        self.strays: set[str] = set()  # admitted here, no record, marker or check of them
        self._strays = Every(STRAYS_S)
        self._reported: set[str] = set()
        self._unsure: set[str] = set()  # destinations reported with an unknown chain order

    def take(self, messages: list[Message]) -> list[Message]:
        """Index the room records among polled messages; return the others."""
        topic = self.topic
        rest = []
        for m in messages:
            if m.topic() == topic:
                if self.index.add(m):  # a drain marker: its group may be waiting to open
                    self.opening.add(self.index.last_marked)
            else:
                rest.append(m)
        return rest

    def due(self) -> bool:
        """Whether a batch with nothing but the drain is worth running now: something
        may be forwarded or opened, and the last drain did something (its settle frees
        and admits) or ran at least IDLE_S ago (a group waiting for the room's end
        offsets must not spin empty transactions). Every STRAYS_S it looks for strays."""
        self._look_for_strays()
        return self.busy() and (self.eager or self._idle.due())

    def busy(self) -> bool:
        """Parked groups or checks in hand: another unit's settle may admit one at any
        time, so the unit polls no longer than IDLE_S between drains."""
        return bool(self.index.groups or self.checks or self.opening or self.strays)

    def _look_for_strays(self) -> None:
        if self.owned and self._strays.due():
            self._find_strays()

    def _find_strays(self) -> None:
        """Admitted groups on this unit's room partitions of which it holds no record,
        marker or check. A batch counted their parks and aborted, and its replay did not
        park them again (an ordinary message that found a destination free then, a member
        whose lifetime ended meanwhile); or the drain marker that would open them lies
        below the committed low mark. Nothing of theirs is in the room, yet each holds its
        destination: they are checked as any admitted group (open, or a lane's released,
        once the partition was read to its end with no park in flight)."""
        try:
            admitted = self.table.admitted()
        except redis.RedisError as exc:
            self.metrics.inc("redis_errors")
            log.warning("admitted groups not read, looked for again later: %s", exc)
            return
        known = self.index.gids() | set(self.checks) | self.opening
        self.strays = {
            gid
            for gid in admitted
            if gid not in known and (self.topic, room_partition(gid, self.partitions)) in self.owned
        }
        new = self.strays - self._reported  # reported once each
        self._reported = (self._reported & set(admitted)) | new
        if new:
            self.metrics.inc("room_strays", len(new))
            log.warning("admitted with no record in the room, checked: %s", ", ".join(sorted(new)))

    def assign(self, tps: list[TP]) -> None:
        for tp in tps:
            if tp[0] == self.topic:
                self.owned.add(tp)
                self.catch_up[tp] = None
                self.positions.forget([tp])

    def reset(self) -> None:
        """The consumer went back to the committed offsets (a transaction's outcome was
        unknown): rebuild the index from the low marks, and catch up before draining."""
        self.index = RoomIndex()
        self.checks.clear()
        self.catch_up = dict.fromkeys(self.owned)
        self.positions.forget()
        self.logical.gaps.clear()

    def revoke(self, tps: list[TP]) -> None:
        """Room partitions gone to another unit, which reads their drain markers and
        finishes their groups' switches: nothing of theirs stays here (an `opening` group
        left behind would keep `busy()` true, and the unit running empty batches)."""
        gone = {tp for tp in tps if tp[0] == self.topic}
        self.positions.forget(gone)
        for tp in gone:
            self.owned.discard(tp)
            self.catch_up.pop(tp, None)
            self.index.revoke(tp)
            for gid in [g for g, c in self.checks.items() if c.tp == tp]:
                del self.checks[gid]
        self.opening = {
            g for g in self.opening if (self.topic, room_partition(g, self.partitions)) not in gone
        }

    def emit(self, batch: Batch, out: Output, now_ms: int) -> None:
        """Add the batch's drain: records, markers, finals, drains and room offsets."""
        if not self.owned:
            return
        self._look_for_strays()  # here too: a unit with traffic never runs idle drains
        if self.claims is not None:  # the settle's drains carry these claims: take them first
            try:
                self.claims.ensure({lane_of(*tp) for tp in self.owned})
            except Unclaimed as exc:
                log.warning("no drain this batch: %s", exc)
                return
        self._ends_now = None
        stray, self.strays = self.strays, set()  # a check each, or looked for again
        states = self.table.room_state(
            sorted(self.index.gids() | set(self.checks) | self.opening | stray)
        )
        self.opening &= {g for g, st in states.items() if st.state == room.ADMITTED}
        positions = self.positions.of(self.consumer, self.owned)
        for tp, known in list(self.catch_up.items()):
            end = known
            if end is None:
                end = self.catch_up[tp] = self._end(tp)
                if end is None:
                    continue  # the broker cannot say now: caught up later
            if end == 0 or positions.get(tp, -1) >= end:
                del self.catch_up[tp]
        drained: set[str] = set()
        held_back: set[str] = set()
        heads: dict[str, list[tuple[TP, str]]] = {}  # forwarded whole: chains may follow
        before = len(out.records)
        unknown: set[str] = set()  # destinations whose aborted chain's order is unknown
        for tp in sorted(set(self.index.groups) - set(self.catch_up)):  # caught up only
            groups = dict(self.index.groups[tp])
            order, behind, unsure = chaining.replay_order(groups, states)  # aborted chains
            held_back |= behind
            unknown |= set(unsure)
            for gid in order:
                if gid in behind:
                    continue
                parked, state = groups[gid], states.get(gid)
                if state is not None and state.state == room.ADMITTED and state.closing != STOPPED:
                    if state.next >= 0:  # logical order
                        if self.logical.drain(self, tp, gid, parked, state, out, batch, now_ms):
                            drained.add(gid)
                            self.opening.add(gid)
                        else:
                            held_back.add(gid)
                        continue
                    if state.closing and not parked[-1].final:
                        held_back.add(gid)  # its final is parked, not read yet: all in
                        continue  # one go, and it must not open before (no check)
                    if gid not in self.opening:  # its first drain: how long it waited
                        ts_type, ts = parked[0].m.timestamp()
                        out.room_waits_ms.append(max(now_ms - ts, 0) if ts_type else 0)
                    drainwrite.forward(self, tp, gid, parked, state.dest, out, batch, now_ms)
                    drained.add(gid)
                    self.opening.add(gid)
                    if chaining.whole(gid, parked, state):
                        heads.setdefault(state.dest, []).append((tp, gid))
                elif state is None or state.state == room.OPEN or state.closing == STOPPED:
                    if (
                        state is not None
                        and state.state == room.ADMITTED
                        and state.dest != NO_DEST
                        and state.fence
                        and not self.logical.fence_settled(self, state.fence)
                    ):  # logical order: a member routed straight may still land there first
                        held_back.add(gid)
                        continue
                    drainwrite.dead_letter_rest(self, tp, gid, parked, state, out, batch, now_ms)
                    if state is not None and state.state == room.ADMITTED:
                        drained.add(gid)  # stopped in the room: opens once nothing is left
                        self.opening.add(gid)
                        if state.dest != NO_DEST:  # stopped while it held its destination
                            drainwrite.close_stopped(self, gid, parked, state.dest, out)
        if unknown - self._unsure:  # reported once, while it lasts
            log.warning("aborted chain's order unknown, nothing drained to %s", sorted(unknown))
        self._unsure = unknown
        if heads:
            drained |= chained.chain(self, heads, states, out, batch, now_ms)
        checks.advance(self, states, drained | held_back, positions, out, self._end)
        for key in list(self.index.pending):  # the table knows the marker's next number
            state = states.get(key[1])
            if (
                state is None
                or state.next >= self.index.pending[key][1]
                or state.origin != self.index.origin.get(key)  # the ID reused since
            ):
                del self.index.pending[key]
        self.eager = len(out.records) > before or bool(out.drains)
        batch.room_offsets = [
            TopicPartition(tp[0], tp[1], self.index.low_mark(tp, positions[tp]))
            for tp in sorted(self.owned)
            if positions.get(tp, -1) >= 0
        ]

    def claim_of(self, lane: str) -> str | None:
        return self.table.claims.get(lane)

    def _end(self, tp: TP) -> int | None:
        """A room partition's end offset, read after this batch's room states; None if the
        broker cannot say now (a leader moving after a restart): the drain waits, the unit
        goes on."""
        if self.ends is not None:
            if self._ends_now is None:  # every owned partition in one request
                self._ends_now = self.ends(sorted(self.owned))
            return self._ends_now.get(tp)
        try:
            _, end = self.consumer.get_watermark_offsets(TopicPartition(*tp), 10, False)  # type: ignore[attr-defined]
        except KafkaException as exc:
            log.warning("end offset of %s[%d] unknown, retried later: %s", tp[0], tp[1], exc)
            return None
        return int(end)

    def settle(self, batch: Batch) -> None:
        """The batch committed: its drained records are gone from the index."""
        for (tp, gid), (through, next_seq, origin) in batch.extra.get("drained", {}).items():
            self.index.mark(tp, gid, through, next_seq, origin)
        self.logical.settle(batch)


__all__ = ["Drain"]
