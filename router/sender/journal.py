"""A `Sender`'s durable record of its open groups: written around its produce calls in the
order `router.state.sender` explains, and read back when a sender restarts under its ID.

Not thread-safe on its own: the Sender calls it under its lock, and delivery callbacks
(`delivered`) only queue work that `sync` writes.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from router.contract.request import Request
from router.sender import tailprobe
from router.sender.groups import OpenGroup, OpenGroups
from router.state.sender import GroupRecord, Resumed, resume
from router.state.store import SenderStore

log = logging.getLogger("router.sender")

TP = tuple[str, int]
Probe = Callable[[Mapping[str, Any], TP, int, set[str]], dict[str, list[Any]]]


@dataclass(frozen=True, slots=True)
class OpenGroupInfo:
    """One open group: its lane (send queue, partition), its next sequence number and how
    long ago it was opened (seconds; across restarts for a sender with an ID)."""

    topic: str
    partition: int
    next_seq: int
    age_s: float


class Journal:
    """The open groups of one sender ID, in Redis (`router.state.store.SenderStore`)."""

    FINALS_KEPT = 10_000

    def __init__(self, store: SenderStore) -> None:
        self.store = store
        self.records: dict[str, GroupRecord] = {}
        self._acks: dict[str, GroupRecord] = {}  # checkpoints to write
        self._finished: dict[str, str] = {}  # gid -> token: finals acknowledged
        # gid -> (partition, offset) of its last acknowledged final: a reopened ID's scan
        # starts after it, so the old group's final is not taken for the new one's.
        self._finals: dict[str, tuple[TP, int]] = {}
        self.finals_in_flight: set[str] = set()

    def resume(
        self, connection: Mapping[str, Any], probe: Probe = tailprobe.probe
    ) -> list[Resumed]:
        """Take the ID over and find where each recorded group stands on its lane; the
        finished ones are removed, the others written back with their next number."""
        self.store.take_over(secrets.token_hex(8))
        recorded = self.store.load()
        lanes: dict[TP, list[GroupRecord]] = {}
        for r in recorded.values():
            lanes.setdefault(r.tp, []).append(r)
        out: list[Resumed] = []
        for tp, records in sorted(lanes.items()):
            start = min(r.scan_from for r in records)
            tails = probe(connection, tp, start, {r.gid for r in records})
            out += [resume(r, tails.get(r.gid, [])) for r in records]
        finished = [(x.record.gid, x.record.token) for x in out if x.finished]
        self.store.remove(finished)
        going = [x for x in out if not x.finished]
        self.store.put(x.record for x in going)
        self.records = {x.record.gid: x.record for x in going}
        for x in going:
            if x.gaps:
                log.error(
                    "group %r resumed with numbers %s missing on %s[%d] (not delivered "
                    "before the crash): it cannot arrive complete; abandon it",
                    x.record.gid, list(x.gaps), x.record.topic, x.record.partition,
                )  # fmt: skip
        return out

    def opening(self, gid: str, tp: TP, bound: int, logical: bool, seq: int = 0) -> GroupRecord:
        """Record a new group before its first member (`seq`) is produced (`bound`: an
        end offset of `tp` measured before now)."""
        final = self._finals.get(gid)
        if final is not None and final[0] == tp:
            bound = max(bound, final[1] + 1)
        record = GroupRecord(
            gid,
            tp[0],
            tp[1],
            secrets.token_hex(6),
            bound,
            -1,
            seq + 1,
            int(time.time() * 1000),
            logical,
        )
        self._finished.pop(gid, None)
        self._acks.pop(gid, None)
        self.store.put([record])
        self.records[gid] = record
        return record

    def sending(self, gid: str, seq: int, final: bool) -> str:
        """A member is about to be produced; the group's token (for `delivered`)."""
        record = self.records[gid]
        if seq + 1 > record.next_seq:
            self.records[gid] = replace(record, next_seq=seq + 1)
        if final:
            self.finals_in_flight.add(gid)
        return record.token

    def record(
        self,
        r: Request,
        tp: TP,
        seq: int,
        new: bool,
        end: int,
        lock: AbstractContextManager[Any],
        flush: Callable[[], None],
    ) -> tuple[str, str, int, bool]:
        """`Sender.send` for a member of a group: a new group's record is written before
        its first member goes out (`end`: `tp`'s end offset measured before now). If the
        ID's previous final is still in flight, `flush` first: its offset is where the new
        group's scan starts. The member's (ID, token, seq, final) for `delivered`."""
        gid = r.guarantee_id
        assert gid is not None
        if new:
            if gid in self.finals_in_flight:
                flush()
            with lock:
                self.opening(gid, tp, end, r.logical, seq)
        with lock:
            return (gid, self.sending(gid, seq, r.final), seq, r.final)

    def delivered(self, gid: str, token: str, seq: int, tp: TP, offset: int, final: bool) -> None:
        """Kafka acknowledged a member (a delivery callback): queue its checkpoint."""
        if final:
            self.finals_in_flight.discard(gid)
            self._finished[gid] = token
            self._finals[gid] = (tp, offset)
            while len(self._finals) > self.FINALS_KEPT:
                del self._finals[next(iter(self._finals))]
        record = self.records.get(gid)
        if record is None or record.token != token:
            return
        if final:
            del self.records[gid]
            self._acks.pop(gid, None)
            return
        self._acks[gid] = record.acknowledged(seq, offset)
        self.records[gid] = replace(self._acks[gid], next_seq=record.next_seq)

    def abandon(self, gid: str) -> GroupRecord | None:
        """Forget an open group: removed from the state at once."""
        record = self.records.pop(gid, None)
        self._acks.pop(gid, None)
        if record is not None:
            self.store.remove([(gid, record.token)])
        return record

    def sync(self) -> None:
        """Write the queued checkpoints and remove the finished groups (one or two calls)."""
        acks, self._acks = list(self._acks.values()), {}
        finished, self._finished = list(self._finished.items()), {}
        self.store.update(acks)
        self.store.remove(finished)

    def resume_into(
        self, groups: OpenGroups, connection: Mapping[str, Any], probe: Probe = tailprobe.probe
    ) -> None:
        """`resume`, and open the unfinished groups in `groups` again."""
        now = time.monotonic()
        for x in self.resume(connection, probe):
            if not x.finished:
                r = x.record
                groups.restore(r.gid, r.tp, x.next_seq, now, r.logical, set(x.sent))


def info(groups: dict[str, OpenGroup], journal: Journal | None) -> dict[str, OpenGroupInfo]:
    """`Sender.open_groups()`: ages from the journal (they survive restarts) if there is one."""
    now, now_ms = time.monotonic(), time.time() * 1000
    records = journal.records if journal is not None else {}
    out: dict[str, OpenGroupInfo] = {}
    for g, o in groups.items():
        r = records.get(g)
        age = (now_ms - r.opened_ms) / 1000 if r is not None else now - o.opened
        out[g] = OpenGroupInfo(o.tp[0], o.tp[1], o.next_seq, age)
    return out
