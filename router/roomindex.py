"""The drain step's index of the room partitions a unit owns (pure: no I/O).

A parked record names its group (`router-room`) and its source position (`router-token`);
a bad one carries its reason (`router-bad`); a drain marker (`router-control: drained`)
says how far a group's records were forwarded, in the transaction that forwarded them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from confluent_kafka import Message

from router import contract
from router.batch import TP
from router.contract import BadInput

ROOM_HEADERS = contract.ROOM_HEADERS


def room_partition(gid: str, partitions: int) -> int:
    """Where a group's parked records go: all of one group on one partition, in order."""
    return zlib.crc32(gid.encode()) % partitions


@dataclass(slots=True)
class Parked:
    m: Message
    final: bool
    token: str  # its source position, "topic/partition/offset"
    bad: BadInput | None = None  # parked to be dead-lettered in its place
    close: bool = False  # a close marker (receive side): ends the group, forwarded nowhere

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
            self.mark(tp, gid, through)
            self.last_marked = gid
            return True
        final = (headers.get(contract.FINAL) or b"").lower() in (b"true", b"1")
        token = (headers.get(contract.TOKEN) or b"").decode()
        raw = headers.get(contract.BAD)
        bad, final = parked_bad(raw, gid) if raw is not None else (None, final)
        if m.offset() > self.through.get((tp, gid), -1):
            parked = Parked(m, final, token, bad, bad is None and control == contract.CLOSE)
            self.groups.setdefault(tp, {}).setdefault(gid, []).append(parked)
        return False

    def mark(self, tp: TP, gid: str, through: int) -> None:
        """The group's records up to `through` are drained (committed)."""
        key = (tp, gid)
        self.through[key] = max(self.through.get(key, -1), through)
        by_gid = self.groups.get(tp, {})
        rest = [p for p in by_gid.get(gid, []) if p.m.offset() > self.through[key]]
        if rest:
            by_gid[gid] = rest
        else:
            by_gid.pop(gid, None)

    def revoke(self, tp: TP) -> None:
        self.groups.pop(tp, None)
        self.seen.pop(tp, None)
        for key in [k for k in self.through if k[0] == tp]:
            del self.through[key]

    def low_mark(self, tp: TP, position: int) -> int:
        """The offset to commit for a room partition: its oldest undrained record."""
        firsts = [recs[0].m.offset() for recs in self.groups.get(tp, {}).values() if recs]
        return int(min([position, *firsts]))

    def gids(self) -> set[str]:
        return {g for by_gid in self.groups.values() for g in by_gid}
