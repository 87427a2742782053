"""What the Spark receiver's pure checks work on: one message read, one outcome, and a
key's state as Spark's state store keeps it (no Spark).

Executors import this (through `groups`), so it imports nothing of the router: the
segment headers are read into columns on the JVM side (`reading.with_routing`) and come
here as a `Seg`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

GROUP = "group"
RECORD = "record"
DUPLICATE = "duplicate"
VIOLATION = "violation"
EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Seg:
    """A record's segment headers (`router.contract.segments`), already checked: the logical
    message's ID, this segment's index, whether it is the last, and on the last the
    whole payload's length and SHA-256 (hex)."""

    set_id: str
    index: int
    last: bool
    total: int | None = None
    sha256: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    record_id: str
    schema: str
    queue: str
    partition: int
    offset: int
    seq: int  # 0 for an ordinary message
    final: bool
    created_ms: int
    value: bytes
    # Sent with `guarantee-delivery: complete`. Only a new group's first call reads it, so
    # it is not kept with the members a state holds (nor in their stored form).
    complete: bool = False
    segment: Seg | None = None  # one segment of a large message
    # Why it is expired (its lifetime ended before the receiver read it), or None.
    expired: str | None = None
    expire_group: bool = False  # `message-on-expiry: expire-group` (else skip)
    multicast: bool = False  # `message-delivery: multicast`: one copy per queue is expected
    parts: tuple[int, ...] = ()  # a reassembled message: the offsets of its segments

    @property
    def where(self) -> str:
        return f"{self.queue}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class Outcome:
    output: str  # GROUP, RECORD, DUPLICATE, VIOLATION or EXPIRED
    message: Message | None  # the message (None for GROUP)
    reason: str | None = None
    members: tuple[Message, ...] = ()  # GROUP: every message, in sequence
    # RECORD of a large ordinary message, reassembled from a group of its own (guarantee
    # ID = segment ID): the application sees it as ordinary, with no group.
    ordinary: bool = False


Status = Literal["open", "done", "broken", "expired"]


@dataclass
class State:
    status: Status
    queue: str = ""
    partition: int = 0
    members: list[Message] = field(default_factory=list)  # open: accepted so far
    seen: list[str] = field(default_factory=list)  # done: record IDs by seq
    reason: str = ""  # broken / expired: why
    skipped: dict[int, str] = field(default_factory=dict)  # open: expired seq -> record ID
    expired_sets: list[str] = field(default_factory=list)  # open: expired segmented messages

    @property
    def next_seq(self) -> int:
        return len(self.members) + len(self.skipped)

    def record_at(self, seq: int) -> tuple[str, str]:
        """(record ID, where) of the message accepted or skipped at `seq`."""
        if seq in self.skipped:
            return self.skipped[seq], "(expired)"
        m = next(m for m in self.members if m.seq == seq)
        return m.record_id, m.where

    # ------------------------------------------------------------ (de)serialising
    #
    # As `group_state.GroupProcessor` stores it: the key's metadata (`meta_json`: no
    # members) in a value state and its members, one `member_row` each, in a list state,
    # appended as they are accepted: a new member never rewrites the ones before it
    # (`appended`).

    def meta_json(self) -> str:
        """The key's metadata without its members: a value state of `GroupProcessor`."""
        meta: dict[str, Any] = {
            "status": self.status,
            "queue": self.queue,
            "partition": self.partition,
            "seen": self.seen,
            "reason": self.reason,
        }
        if self.skipped:
            meta["skipped"] = sorted(self.skipped.items())
        if self.expired_sets:
            meta["expired_sets"] = self.expired_sets
        return json.dumps(meta, separators=(",", ":"))

    def stored(self) -> tuple[str, list[tuple[Any, ...]]]:
        """(`meta_json`, a `member_row` per member): everything `GroupProcessor` keeps."""
        return self.meta_json(), [member_row(m) for m in self.members]

    @classmethod
    def from_stored(cls, meta_json: str, rows: Iterable[Sequence[Any]]) -> State:
        """The state from `meta_json` and its members' `member_row`s, in order."""
        return cls.from_meta(json.loads(meta_json), rows)

    @classmethod
    def from_meta(cls, meta: dict[str, Any], rows: Iterable[Sequence[Any]]) -> State:
        """`from_stored` with the metadata already parsed."""
        queue, partition = meta["queue"], meta["partition"]
        members = [_member(queue, partition, row) for row in rows]
        return cls(
            meta["status"],
            queue,
            partition,
            members,
            meta["seen"],
            meta["reason"],
            {int(k): v for k, v in meta.get("skipped", [])},
            list(meta.get("expired_sets", [])),
        )

    def appended(self, before: list[Message]) -> list[Message] | None:
        """The members added since the state held `before` (the members it was loaded
        with), if it only added some; None if it dropped or replaced any (a group that
        finished, broke or expired keeps none; an expired segment takes its message's
        earlier segments out), so the stored list must be rewritten or cleared."""
        n = len(before)
        if len(self.members) < n or any(
            a is not b for a, b in zip(before, self.members, strict=False)
        ):
            return None
        return self.members[n:]


def _seg_out(s: Seg) -> list[Any]:
    return [s.set_id, s.index, s.last, s.total, s.sha256]


MEMBER_SCHEMA = (
    "record_id STRING, schema STRING, offset BIGINT, seq BIGINT, final BOOLEAN, "
    "created_ms BIGINT, value BINARY, segment STRING"
)


def member_row(m: Message) -> tuple[Any, ...]:
    """One member as a row of MEMBER_SCHEMA (its queue is the state's; `segment`: its
    segment headers as JSON, or None)."""
    seg = None if m.segment is None else json.dumps(_seg_out(m.segment), separators=(",", ":"))
    return (m.record_id, m.schema, m.offset, m.seq, m.final, m.created_ms, m.value, seg)


def _member(queue: str, partition: int, row: Sequence[Any]) -> Message:
    record_id, schema, offset, seq, final, created_ms, value, seg = row
    return Message(
        str(record_id),
        str(schema),
        queue,
        partition,
        int(offset),
        int(seq),
        bool(final),
        int(created_ms),
        bytes(value),
        segment=Seg(*json.loads(seg)) if isinstance(seg, str) else None,  # None or NaN: none
    )
