"""The drain step's index of the room partitions a unit owns (pure: no I/O).

A parked record names its group (`router-room`) and its source position (`router-token`);
a bad one carries its reason (`router-bad`); a drain marker (`router-control: drained`)
says how far a group's records were forwarded, in the transaction that forwarded them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Message

from router import contract
from router.contract.headers import BadInput
from router.unit.steps.batch import TP

ROOM_HEADERS = contract.ROOM_HEADERS


@dataclass(slots=True)
class Parked:
    m: Message
    final: bool
    token: str  # its source position, "topic/partition/offset"
    bad: BadInput | None = None  # parked to be dead-lettered in its place
    close: bool = False  # a close marker (receive side): ends the group, forwarded nowhere
    seq: int | None = None  # its `guarantee-seq`, if readable (logical order)
    skip: bool = False  # a skip marker (receive side): a member not forwarded, nothing to write

    def source(self) -> tuple[str, int, int] | None:
        topic, _, rest = self.token.partition("/")
        partition, _, offset = rest.partition("/")
        if not (topic and partition.isdigit() and offset.isdigit()):
            return None
        return topic, int(partition), int(offset)

    def headers(self) -> list[tuple[str, bytes | None]]:
        """Its own headers, without the room's."""
        return [(k, v) for k, v in (self.m.headers() or []) if k not in ROOM_HEADERS]


def parked_bad(raw: bytes, gid: str) -> tuple[BadInput, bool]:
    """The reason and final flag of a bad parked record (header `router-bad`)."""
    code, final, detail = [*raw.decode("utf-8", "replace").split("|", 2), "", ""][:3]
    bad = BadInput(code or "bad-input", detail)
    bad.guarantee_id, bad.final = gid, final == "1"
    return bad, bad.final


@dataclass
class RoomIndex:
    """Parked records of the room partitions this unit owns (pure, no I/O)."""

    groups: dict[TP, dict[str, list[Parked]]] = field(default_factory=dict)
    through: dict[tuple[TP, str], int] = field(default_factory=dict)  # drained up to
    # logical order: the group's records up to `through` with a sequence number below this
    # are drained; the others wait for a gap to fill. With the origin of the group (its
    # entry's) the markers were for: the ID reused later is another group.
    next_seq: dict[tuple[TP, str], int] = field(default_factory=dict)
    origin: dict[tuple[TP, str], str] = field(default_factory=dict)
    # logical order: drain markers whose next number the table may not know yet (the unit
    # died before settling): the low mark stays at them, so a new owner reads them again
    pending: dict[tuple[TP, str], tuple[int, int]] = field(default_factory=dict)
    seen: dict[TP, int] = field(default_factory=dict)  # highest offset read
    last_marked: str = ""

    def add(self, m: Message) -> bool:
        """Index a room record; True if it is a drain marker (`last_marked` names its
        group)."""
        tp = (m.topic(), m.partition())
        if m.offset() <= self.seen.get(tp, -1):
            return False  # read again after a rewind: already indexed
        self.seen[tp] = m.offset()
        headers = dict(m.headers() or [])
        gid = (headers.get(contract.ROOM) or b"").decode()
        control = headers.get(contract.CONTROL)
        # A drain marker has no source position; a parked record always has one (a
        # sender's own `router-control` header cannot pass for a marker).
        if control == contract.DRAINED and contract.TOKEN not in headers:
            through = int(headers.get(contract.THROUGH) or b"-1")
            raw_next = headers.get(contract.NEXT_SEQ)
            origin = (headers.get(contract.ORIGIN) or b"").decode()
            self.mark(tp, gid, through, int(raw_next) if raw_next else None, origin)
            if raw_next:
                self.pending[(tp, gid)] = (m.offset(), int(raw_next))
            self.last_marked = gid
            return True
        final = (headers.get(contract.FINAL) or b"").lower() in (b"true", b"1")
        token = (headers.get(contract.TOKEN) or b"").decode()
        raw = headers.get(contract.BAD)
        bad, final = parked_bad(raw, gid) if raw is not None else (None, final)
        raw_seq = headers.get(contract.SEQ)
        seq = int(raw_seq) if raw_seq and raw_seq.isdigit() else None
        if bad is not None:
            bad.seq = seq  # a dead letter's or an ExpiredMessage event's sequence number
        if not self._drained(tp, gid, m.offset(), seq):
            close = bad is None and control == contract.CLOSE
            skip = bad is None and control == contract.SKIP
            parked = Parked(m, final, token, bad, close, seq, skip)
            self.groups.setdefault(tp, {}).setdefault(gid, []).append(parked)
        return False

    def _drained(self, tp: TP, gid: str, offset: int, seq: int | None) -> bool:
        key = (tp, gid)
        if offset > self.through.get(key, -1):
            return False
        next_seq = self.next_seq.get(key)
        return next_seq is None or seq is None or seq < next_seq

    def mark(
        self, tp: TP, gid: str, through: int, next_seq: int | None = None, origin: str = ""
    ) -> None:
        """The group's records up to `through` are drained (committed); in logical order
        (`next_seq`, for the group started at `origin`), only those of them with a lower
        sequence number."""
        key = (tp, gid)
        self.through[key] = max(self.through.get(key, -1), through)
        if next_seq is not None:
            if self.origin.get(key) == origin:
                next_seq = max(self.next_seq.get(key, -1), next_seq)
            self.next_seq[key], self.origin[key] = next_seq, origin
        else:  # not in sequence order (or no longer: dead-lettered): all up to `through`
            self.next_seq.pop(key, None)
            self.origin.pop(key, None)
        by_gid = self.groups.get(tp, {})
        rest = [p for p in by_gid.get(gid, []) if not self._drained(tp, gid, p.m.offset(), p.seq)]
        if rest:
            by_gid[gid] = rest
        else:
            by_gid.pop(gid, None)

    def revoke(self, tp: TP) -> None:
        self.groups.pop(tp, None)
        self.seen.pop(tp, None)
        for key in [k for k in self.through if k[0] == tp]:
            del self.through[key]
            self.next_seq.pop(key, None)
            self.origin.pop(key, None)
        for key in [k for k in self.pending if k[0] == tp]:
            del self.pending[key]

    def low_mark(self, tp: TP, position: int) -> int:
        """The offset to commit for a room partition: its oldest undrained record."""
        firsts = [recs[0].m.offset() for recs in self.groups.get(tp, {}).values() if recs]
        marks = [offset for (p, _), (offset, _) in self.pending.items() if p == tp]
        return int(min([position, *firsts, *marks]))

    def drained_to(self, tp: TP, gid: str, origin: str) -> int:
        """Logical order: the sequence number the last drain marker of the group started at
        `origin` reached (-1: none, or the markers were for an earlier group of the ID)."""
        key = (tp, gid)
        return self.next_seq.get(key, -1) if self.origin.get(key) == origin else -1

    def gids(self) -> set[str]:
        return {g for by_gid in self.groups.values() for g in by_gid}
