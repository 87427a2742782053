"""The receiver's per-group checks and reassembly, as a pure state machine (no Spark).

The Spark receiver keeps one `State` per guarantee ID (and one per ordinary record, for
de-duplication) in `applyInPandasWithState` and calls `step` with the key's new messages.
A group's messages must all come from one receive queue (partition), in sequence from 0
with no gap; the message with the final flag completes the group. Outcomes:

* GROUP: a complete group, its members in order (one row, reassembled by the receiver);
* RECORD: an ordinary message, the first time its record ID is seen;
* DUPLICATE: a copy of a message already accepted (same group, seq and record ID, or the
  same ordinary record ID) - what a repeated send produces; not a broken guarantee;
* VIOLATION: a broken guarantee, with the reason: a message on a second queue (split), a
  gap or reversal in the sequence (order), a second message with one seq but another
  record ID (conflict), a message after the group was finished, or a group left
  incomplete for longer than the group timeout (in event time: see `group_state`). Once
  broken, a group's accepted messages and every later one are reported as violations
  too, so every message is accounted for.

A finished group (or ordinary record) is remembered for the dedupe horizon, then forgotten.

Whole groups: a group sent with whole-group delivery (`guarantee-delivery: complete` on
its first message) is written by the router to one queue in one Kafka transaction, so a
`read_committed` reader usually gets all of it in one micro-batch. When a new group's
messages in one call are exactly that (one queue, seq 0 to the final in offset order,
nothing else), `step` emits it at once and keeps only the finished marker: its payloads
never enter the state. Anything else (a part of the group, because `maxOffsetsPerTrigger`
ended a micro-batch inside its transaction; a copy; a gap) goes through the state machine
like any group, which reaches the same outcome: the verdicts never depend on where a
micro-batch ends, only what the state holds meanwhile does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

GROUP = "group"
RECORD = "record"
DUPLICATE = "duplicate"
VIOLATION = "violation"

Status = Literal["open", "done", "broken"]


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

    @property
    def where(self) -> str:
        return f"{self.queue}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class Outcome:
    output: str  # GROUP, RECORD, DUPLICATE or VIOLATION
    message: Message | None  # the message (None for GROUP)
    reason: str | None = None
    members: tuple[Message, ...] = ()  # GROUP: every message, in sequence


@dataclass
class State:
    status: Status
    queue: str = ""
    partition: int = 0
    members: list[Message] = field(default_factory=list)  # open: accepted so far
    seen: list[str] = field(default_factory=list)  # done: record IDs by seq
    reason: str = ""  # broken: why

    # ------------------------------------------------------------ (de)serialising

    def dump(self) -> tuple[str, bytes]:
        """(metadata JSON, payload bytes): what Spark's state store keeps."""
        meta = {
            "status": self.status,
            "queue": self.queue,
            "partition": self.partition,
            "seen": self.seen,
            "reason": self.reason,
            "members": [
                [m.record_id, m.schema, m.offset, m.seq, m.final, m.created_ms, len(m.value)]
                for m in self.members
            ],
        }
        return json.dumps(meta, separators=(",", ":")), b"".join(m.value for m in self.members)

    @classmethod
    def load(cls, meta_json: str, blob: bytes) -> State:
        meta = json.loads(meta_json)
        members = []
        at = 0
        for record_id, schema, offset, seq, final, created_ms, size in meta["members"]:
            members.append(
                Message(
                    record_id,
                    schema,
                    meta["queue"],
                    meta["partition"],
                    offset,
                    seq,
                    final,
                    created_ms,
                    blob[at : at + size],
                )
            )
            at += size
        return cls(
            meta["status"], meta["queue"], meta["partition"], members, meta["seen"], meta["reason"]
        )


def _order(messages: Iterable[Message]) -> list[Message]:
    return sorted(messages, key=lambda m: (m.queue, m.partition, m.offset))


def step(
    guarantee_id: str | None, state: State | None, messages: Iterable[Message]
) -> tuple[State, list[Outcome]]:
    """Apply a key's new messages (any order; checked in queue order) to its state."""
    ordered = _order(messages)
    if guarantee_id is None:
        return _ordinary(state, ordered)
    if not ordered:
        raise ValueError("step() needs at least one message")
    if state is None and (whole := _whole(ordered)) is not None:
        return whole
    if state is None:
        # A new group's queue is where its lowest seq is; with no order across queues,
        # a message on another queue in the same micro-batch is the split, not a reversal.
        first = min(ordered, key=lambda m: (m.seq, m.offset))
        state = State("open", first.queue, first.partition)
    home = (state.queue, state.partition)
    ordered.sort(key=lambda m: (m.queue, m.partition) != home)  # stable: offsets stay sorted
    out: list[Outcome] = []
    for m in ordered:
        if state.status == "open":
            state = _open(state, m, out)
        elif state.status == "done":
            if m.seq < len(state.seen) and state.seen[m.seq] == m.record_id:
                out.append(Outcome(DUPLICATE, m, f"copy of seq {m.seq} of a finished group"))
            else:
                out.append(
                    Outcome(VIOLATION, m, f"seq {m.seq} ({m.record_id}) after the group's final")
                )
        else:
            out.append(Outcome(VIOLATION, m, f"in a broken group: {state.reason}"))
    return state, out


def _whole(ordered: list[Message]) -> tuple[State, list[Outcome]] | None:
    """A new group sent whole (its seq 0 asks for whole-group delivery) whose messages,
    in offset order, are all of it: one queue, seq 0, 1, ... and the final last. Its
    GROUP outcome, and the finished marker as its state (no payloads); else None."""
    first = ordered[0]
    if not first.complete:
        return None
    last = len(ordered) - 1
    for i, m in enumerate(ordered):
        if (m.queue, m.partition) != (first.queue, first.partition):
            return None
        if m.seq != i or m.final != (i == last):
            return None
    seen = [m.record_id for m in ordered]
    return State("done", first.queue, first.partition, seen=seen), [
        Outcome(GROUP, None, None, tuple(ordered))
    ]


def _ordinary(state: State | None, messages: list[Message]) -> tuple[State, list[Outcome]]:
    out = []
    for m in messages:
        if state is None:
            out.append(Outcome(RECORD, m))
            state = State("done", m.queue, m.partition, seen=[m.record_id])
        else:
            out.append(Outcome(DUPLICATE, m, f"copy of ordinary record {m.record_id}"))
    assert state is not None, "step() needs at least one message for a new key"
    return state, out


def _open(state: State, m: Message, out: list[Outcome]) -> State:
    expected = len(state.members)
    if (m.queue, m.partition) != (state.queue, state.partition):
        return _break(
            state, m, f"split: seq {m.seq} on {m.where}, the group is on {state.queue}", out
        )
    if m.seq < expected:
        first = state.members[m.seq]
        if first.record_id == m.record_id:
            out.append(Outcome(DUPLICATE, m, f"copy of seq {m.seq} at {first.where}"))
            return state
        return _break(
            state, m, f"conflict: seq {m.seq} is {m.record_id}, was {first.record_id}", out
        )
    if m.seq > expected:
        return _break(state, m, f"order: seq {m.seq} arrived where seq {expected} was due", out)
    state.members.append(m)
    if not m.final:
        return state
    out.append(Outcome(GROUP, None, None, tuple(state.members)))
    return State("done", state.queue, state.partition, seen=[x.record_id for x in state.members])


def _break(state: State, m: Message, reason: str, out: list[Outcome]) -> State:
    for earlier in state.members:
        out.append(Outcome(VIOLATION, earlier, f"in a broken group: {reason}"))
    out.append(Outcome(VIOLATION, m, reason))
    return State("broken", state.queue, state.partition, reason=reason)


def expire(state: State, idle_ms: int) -> list[Outcome]:
    """The key's state timed out: an open group is incomplete, the rest is forgotten."""
    if state.status != "open":
        return []
    reason = (
        f"incomplete: no final message within {idle_ms} ms of event time "
        f"(received seq 0..{len(state.members) - 1})"
    )
    return [Outcome(VIOLATION, m, reason) for m in state.members]
