"""The drain step's part for groups in logical order (`guarantee-order: logical`): the
I/O around `router.unit.steps.drain.sequence` (its pure plan): the fence check against the side's
committed offsets, the SequenceGap event and the gap policy, dead letters for duplicates."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException, TopicPartition

from router.contract import events
from router.contract.headers import BadInput
from router.table.routing import RoomState
from router.unit.steps.batch import TP, Batch, Item
from router.unit.steps.drain import sequence
from router.unit.steps.drain import writes as drainwrite
from router.unit.steps.drain.context import Draining
from router.unit.steps.drain.index import Parked
from router.unit.steps.emit.records import Output, Record

log = logging.getLogger("router.drain")


class LogicalOrder:
    def __init__(self, gap_timeout_ms: int, gap_policy: str) -> None:
        self.gap_timeout_ms, self.gap_policy = gap_timeout_ms, gap_policy
        # gid -> (missing number, when this unit first saw it missing), and the fences
        # known settled (their batch committed, or aborted and replayed)
        self.gaps: dict[str, tuple[int, int]] = {}
        self.reported: set[tuple[str, int]] = set()  # SequenceGap events committed
        self.fences: set[str] = set()

    def settle(self, batch: Batch) -> None:
        """The batch committed: its SequenceGap events are published."""
        self.reported.update(batch.extra.get("gaps_reported", ()))
        if len(self.reported) > 100_000:
            self.reported.clear()

    def drain(
        self,
        d: Draining,
        tp: TP,
        gid: str,
        parked: list[Parked],
        state: RoomState,
        out: Output,
        batch: Batch,
        now_ms: int,
    ) -> bool:
        """Drain an admitted group in logical order: its parked members from the next
        number on, in sequence order, as far as they run without a gap; duplicates and
        members without a number are dead-lettered. Nothing before the fence's batch is
        settled (a member routed straight before the group came back to the room may not
        be committed yet). True if anything was drained."""
        if state.fence and not self.fence_settled(d, state.fence):
            return False
        marked = d.index.drained_to(tp, gid, state.origin)
        first = sequence.start(parked, state.next, marked, state.fence)
        plan = sequence.plan(parked, first)
        if plan.gap is not None and not plan.forward:
            missing, _ = plan.gap
            seen = self.gaps.get(gid)
            if seen is None or seen[0] != missing:
                self.gaps[gid] = seen = (missing, now_ms)
            waited = now_ms - seen[1]
            if waited >= self.gap_timeout_ms:
                if (gid, missing) not in self.reported:  # once it commits (`settle`)
                    out.records.append(self._gap_event(d, gid, plan, waited, now_ms, out))
                    batch.extra.setdefault("gaps_reported", []).append((gid, missing))
                if self.gap_policy == "deliver":
                    plan = sequence.plan(parked, first, skip_gap=True)
        else:
            self.gaps.pop(gid, None)
        final_waits = state.closing and not any(p.final for p in plan.forward)
        if final_waits and plan.waiting:
            return False  # its final is parked behind a gap: all in one go, later
        if plan.through < 0:
            return False
        for p in [*plan.unsequenced, *plan.duplicates]:
            if p.bad is not None:
                bad = p.bad
            elif p.seq is None:
                bad = BadInput("bad-seq", f"a member of group {gid!r} (logical order) has no seq")
            else:
                bad = BadInput(
                    "duplicate-seq",
                    f"group {gid!r} already delivered (or skipped) sequence number {p.seq}",
                )
                out.seq_duplicates += 1
            item = Item(p.m, p.headers(), None)
            out.records.append(d.emitter.dead_letter(item, bad, now_ms, p.source()))
            out.lettered(bad)  # an expired one: its ExpiredMessage event
        if plan.forward:
            if gid not in d.opening:  # its first drain: how long it waited
                ts_type, ts = plan.forward[0].m.timestamp()
                out.room_waits_ms.append(max(now_ms - ts, 0) if ts_type else 0)
            before = len(out.finals)
            drainwrite.forward(d, tp, gid, plan.forward, state.dest, out, batch, now_ms, False)
            if state.closing:  # released by the entry's token, whichever copy went out
                out.finals[before:] = [(g, state.closing) for g, _ in out.finals[before:]]
                if len(out.finals) > before:  # the table remembers the number reached
                    # (parks -1: no opening)
                    drainwrite.drained(d, out, tp, (gid, -1, plan.next))
        bad_final = [p for p in plan.unsequenced if p.final]
        if bad_final and final_waits and not plan.waiting:  # no good final forwarded
            # A final whose number cannot be read still ends its group (as in
            # `Drain.forward`): released, and closed downstream on the send side.
            p = bad_final[-1]
            out.finals.append((gid, state.closing))
            drainwrite.drained(d, out, tp, (gid, -1, plan.next))
            if d.spec.side == "send":
                item = Item(p.m, p.headers(), None, p.bad)
                out.records.append(d.emitter.close_marker(item, state.dest, out, p.token))
        drainwrite.marker(d, tp, gid, plan.through, out, batch, plan.next, state.origin)
        return True

    def fence_settled(self, d: Draining, fence: str) -> bool:
        """Whether the send-queue position `fence` is behind the side's committed offset
        (its batch committed, or aborted and replayed)."""
        if fence in self.fences:
            return True
        topic, partition, offset = fence.rsplit("/", 2)
        try:
            got = d.consumer.committed(  # type: ignore[attr-defined]
                [TopicPartition(topic, int(partition))], 5
            )
        except KafkaException as exc:
            log.warning(
                "committed offset of %s[%s] unknown, retried later: %s", topic, partition, exc
            )
            return False
        if got and got[0].offset > int(offset):
            if len(self.fences) > 100_000:
                self.fences.clear()
            self.fences.add(fence)
            return True
        return False

    def _gap_event(
        self, d: Draining, gid: str, plan: sequence.Plan, waited: int, now_ms: int, out: Output
    ) -> Record:
        assert plan.gap is not None
        missing, present = plan.gap
        out.sequence_gaps += 1
        log.warning(
            "group %r waited %d ms for sequence number %d (%d parked behind it): %s",
            gid,
            waited,
            missing,
            len(plan.waiting),
            self.gap_policy,
        )
        emitter = d.emitter
        record = events.sequence_gap(
            gid,
            side=d.spec.side,
            topology=emitter.topology,
            unit=emitter.unit,
            expected=missing,
            present=present,
            parked=len(plan.waiting),
            waited_ms=waited,
            outcome=self.gap_policy,
            now_ms=now_ms,
        )
        return emitter.event(events.SEQUENCE_GAP, gid.encode(), record)
