"""The receiver's per-group checks and reassembly, as a pure state machine (no Spark).

The Spark receiver keeps one `State` per guarantee ID in `transformWithState`
(`group_state.GroupProcessor`: the metadata in a value state, the members in a list
state, appended as they come; see `State.meta_json`, `member_row`, `State.appended`) and
calls `step` with the key's new messages. Ordinary messages keep no state here: Spark
drops their copies in the JVM before they get here (`api.complete_groups`), and
`ordinary` gives each first copy's outcome.
A group's messages must all come from one receive queue (partition), in sequence from 0
with no gap; the message with the final flag completes the group. Outcomes:

* GROUP: a complete group, its members in order (one row, reassembled by the receiver);
* RECORD: an ordinary message (the first time its record ID is seen: `api`);
* DUPLICATE: a copy of a group member already accepted (same group, seq and record ID) -
  what a repeated send produces; not a broken guarantee;
* VIOLATION: a broken guarantee, with the reason: a message on a second queue (split), a
  gap or reversal in the sequence (order), a second message with one seq but another
  record ID (conflict), a message after the group was finished, a group left
  incomplete for longer than the group timeout (in event time: see `group_state`), or a
  segmented message that does not add up (`segmented`: `segment-missing`,
  `checksum-mismatch`, ...). Once broken, a group's accepted messages and every later one
  are reported as violations too, so every message is accounted for;
* EXPIRED: a message whose lifetime (`router.contract.lifetime`'s headers) had ended when the
  receiver read it: never delivered. In a group, `message-on-expiry: skip` (default)
  skips the member and the group goes on without it (its GROUP row shows the gap in
  `seq`); `expire-group` ends the group there: its members so far and every later one
  are EXPIRED too. An expired segment expires its whole message (every segment).

Segments (`router.contract.segments`' contract): a large message travels as consecutive members
of its group; the GROUP row holds it once, reassembled and checked (`segmented`), and a
large *ordinary* message, carried as a group of its own (guarantee ID = segment ID), is
a RECORD, with no group. Multicast copies are told apart by queue before they get here
(`api.complete_groups` keys an ordinary multicast message by record ID and queue).

A finished group is remembered for the dedupe horizon, then forgotten.

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

from collections.abc import Iterable
from dataclasses import replace

from spark_jobs import segmented
from spark_jobs.message import (
    DUPLICATE,
    EXPIRED,
    GROUP,
    MEMBER_SCHEMA,
    RECORD,
    VIOLATION,
    Message,
    Outcome,
    Seg,
    State,
    member_row,
)

__all__ = [
    "DUPLICATE",
    "EXPIRED",
    "GROUP",
    "MEMBER_SCHEMA",
    "RECORD",
    "VIOLATION",
    "Message",
    "Outcome",
    "Seg",
    "State",
    "expire",
    "member_row",
    "ordinary",
    "step",
]


def _order(messages: Iterable[Message]) -> list[Message]:
    return sorted(messages, key=lambda m: (m.queue, m.partition, m.offset))


def step(
    guarantee_id: str, state: State | None, messages: Iterable[Message]
) -> tuple[State, list[Outcome]]:
    """Apply a group's new messages (any order; checked in queue order) to its state."""
    ordered = _order(messages)
    if not ordered:
        raise ValueError("step() needs at least one message")
    if state is None and (whole := _whole(guarantee_id, ordered)) is not None:
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
            state = _open(guarantee_id, state, m, out)
        elif state.status == "done":
            if m.seq < len(state.seen) and state.seen[m.seq] == m.record_id:
                out.append(Outcome(DUPLICATE, m, f"copy of seq {m.seq} of a finished group"))
            else:
                out.append(
                    Outcome(VIOLATION, m, f"seq {m.seq} ({m.record_id}) after the group's final")
                )
        elif state.status == "expired":
            out.append(Outcome(EXPIRED, m, f"in an expired group: {state.reason}"))
        else:
            out.append(Outcome(VIOLATION, m, f"in a broken group: {state.reason}"))
    return state, out


def _whole(gid: str, ordered: list[Message]) -> tuple[State, list[Outcome]] | None:
    """A new group sent whole (its seq 0 asks for whole-group delivery) whose messages,
    in offset order, are all of it: one queue, seq 0, 1, ... and the final last, none
    expired. Its outcome, and the finished marker as its state (no payloads); else None."""
    first = ordered[0]
    if not first.complete:
        return None
    last = len(ordered) - 1
    for i, m in enumerate(ordered):
        if (m.queue, m.partition) != (first.queue, first.partition):
            return None
        if m.seq != i or m.final != (i == last) or m.expired is not None:
            return None
    return _finish(gid, State("open", first.queue, first.partition, list(ordered)))


def ordinary(m: Message) -> Outcome:
    """The outcome of an ordinary message seen for the first time (its copies never get
    here): a RECORD, or EXPIRED if its lifetime had ended."""
    return Outcome(RECORD, m) if m.expired is None else Outcome(EXPIRED, m, m.expired)


def _open(gid: str, state: State, m: Message, out: list[Outcome]) -> State:
    expected = state.next_seq
    if (m.queue, m.partition) != (state.queue, state.partition):
        return _break(
            state, m, f"split: seq {m.seq} on {m.where}, the group is on {state.queue}", out
        )
    if m.seq < expected:
        record_id, where = state.record_at(m.seq)
        if record_id == m.record_id:
            out.append(Outcome(DUPLICATE, m, f"copy of seq {m.seq} at {where}"))
            return state
        return _break(state, m, f"conflict: seq {m.seq} is {m.record_id}, was {record_id}", out)
    if m.seq > expected:
        return _break(state, m, f"order: seq {m.seq} arrived where seq {expected} was due", out)
    if m.segment is not None and m.segment.set_id in state.expired_sets:
        m = _expired_with_its_message(m)
    if m.expired is not None:
        if m.expire_group or (m.segment is not None and m.segment.set_id == gid):
            return _expire_group(state, m, out)
        _skip(state, m, out)
    else:
        state.members.append(m)
    if not m.final:
        return state
    state, found = _finish(gid, state)
    out.extend(found)
    return state


def _expired_with_its_message(m: Message) -> Message:
    assert m.segment is not None
    why = f"expired: a segment of message {m.segment.set_id!r}, whose lifetime ended"
    return replace(m, expired=why)


def _skip(state: State, m: Message, out: list[Outcome]) -> None:
    """Skip expired member `m` (and, if it is a segment, its whole message)."""
    state.skipped[m.seq] = m.record_id
    if m.segment is not None:
        set_id = m.segment.set_id
        if set_id not in state.expired_sets:
            state.expired_sets.append(set_id)
        earlier = [x for x in state.members if x.segment is not None and x.segment.set_id == set_id]
        for x in earlier:
            state.members.remove(x)
            state.skipped[x.seq] = x.record_id
            out.append(Outcome(EXPIRED, x, f"expired: its message {set_id!r} expired at {m.where}"))
    out.append(Outcome(EXPIRED, m, m.expired))


def _expire_group(state: State, m: Message, out: list[Outcome]) -> State:
    reason = f"seq {m.seq} at {m.where} {m.expired}"
    for earlier in state.members:
        out.append(Outcome(EXPIRED, earlier, f"in an expired group: {reason}"))
    out.append(Outcome(EXPIRED, m, m.expired))
    return State("expired", state.queue, state.partition, reason=reason)


def _finish(gid: str, state: State) -> tuple[State, list[Outcome]]:
    """The group's final came: its GROUP outcome, segments reassembled (a RECORD for an
    ordinary message carried as a group of its own), or the violations if a segmented
    message does not add up. The finished marker keeps every seq's record ID."""
    seen_at = {m.seq: m.record_id for m in state.members} | state.skipped
    seen = [seen_at.get(i, "") for i in range(max(seen_at) + 1)]
    done = State("done", state.queue, state.partition, seen=seen)
    members = state.members
    if not members:  # every member expired
        return done, []
    whole = segmented.assemble(members)
    if isinstance(whole, segmented.Broken):
        reason = whole.text
        bad = {id(x) for x in whole.records}
        out = [
            Outcome(VIOLATION, x, reason if id(x) in bad else f"in a broken group: {reason}")
            for x in members
        ]
        return State("broken", state.queue, state.partition, reason=reason), out
    if len(whole) == 1 and segmented.implicit(gid, members):
        return done, [Outcome(RECORD, whole[0], ordinary=True)]
    return done, [Outcome(GROUP, None, None, tuple(whole))]


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
        f"(received seq 0..{state.next_seq - 1})"
    )
    return [Outcome(VIOLATION, m, reason) for m in state.members]
