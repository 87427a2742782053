"""The records a drain writes (`router.unit.steps.drain.step`): a group's parked records forwarded
to its destination, the records of a group that left the room dead-lettered, and the drain markers
that say how far a group was drained, in the batch's transaction."""

from __future__ import annotations

import logging

from router import contract
from router.contract import lifetime, priority
from router.contract.headers import BadInput
from router.table import room
from router.table.routing import STOPPED, RoomState
from router.unit.steps.batch import TP, Batch, Item
from router.unit.steps.drain.context import Draining
from router.unit.steps.drain.index import Parked
from router.unit.steps.emit import letters
from router.unit.steps.emit.records import Output, Record, new_record
from router.unit.steps.ownership import lane_of

log = logging.getLogger("router.drain")


def forward(
    d: Draining,
    tp: TP,
    gid: str,
    parked: list[Parked],
    dest: str,
    out: Output,
    batch: Batch,
    now_ms: int,
    with_marker: bool = True,
) -> None:
    """Forward the group's parked records, in order, to its destination; a bad one is
    dead-lettered in its place, and a bad final still ends the group (released with
    the batch's finals; closed downstream on the send side)."""
    topic, partition = d.spec.target(dest)
    emitter = d.emitter
    for p in parked:
        m = p.m
        headers = p.headers()
        if p.close:  # the send side ended the group here: release it, forward nothing
            out.closes += 1
            out.finals.append((gid, p.token))
            continue
        if p.skip:  # a member the send side did not forward: nothing to write
            out.skips += 1
            continue
        bad = p.bad or _expired_while_parked(d, gid, p, headers, now_ms)
        if bad is not None:
            item = Item(m, headers, None, bad)
            out.records.append(emitter.dead_letter(item, bad, now_ms, p.source()))
            out.lettered(bad)
            if p.final and not room.is_pseudo(gid):
                out.finals.append((gid, p.token))
                if d.spec.side == "send":
                    out.records.append(emitter.close_marker(item, dest, out, p.token))
            elif not room.is_pseudo(gid) and d.spec.side == "send":  # the group goes on
                out.records.append(emitter.skip_marker(item, dest, out, p.token))
            continue
        ts_type, ts = m.timestamp()
        out.records.append(
            new_record(
                Record,
                (topic, partition, m.key(), m.value(), headers, ts if ts_type else 0, None),
            )
        )
        out.forwarded += 1
        if p.final and gid and not room.is_pseudo(gid):
            out.finals.append((gid, p.token))
        out.drained += 1
    if with_marker:
        marker(d, tp, gid, parked[-1].m.offset(), out, batch)


def _expired_while_parked(
    d: Draining, gid: str, p: Parked, headers: list[tuple[str, bytes | None]], now_ms: int
) -> BadInput | None:
    """A parked message whose lifetime (the instant the send unit stamped on it) ended
    while it waited: not forwarded, an ExpiredMessage event instead. Its group goes on
    without it (a final still ends the group): the drain skips it whatever the group's
    message-on-expiry, since stopping a group is the route step's decision."""
    at = letters.instant(headers)
    if at is None or now_ms < at:
        return None
    bad = BadInput(
        lifetime.EXPIRED,
        f"lifetime ended {now_ms - at} ms before it left the {d.spec.side}-side waiting room "
        f"(expires at {at}; skipped)",
    )
    if not room.is_pseudo(gid):
        bad.guarantee_id, bad.seq, bad.final = gid, p.seq, p.final
        bad.on_expiry = "skip"
    bad.expires_ms = at
    return bad


def dead_letter_rest(
    d: Draining,
    tp: TP,
    gid: str,
    parked: list[Parked],
    state: RoomState | None,
    out: Output,
    batch: Batch,
    now_ms: int,
) -> None:
    """Records of a group that is no longer in the room (swept, stopped, released by
    an operator) are dead-lettered with the reason, never dropped."""
    if state is None:
        bad = BadInput(
            "group-entry-missing",
            f"group {gid!r} left the waiting room (swept or released) with parked messages",
        )
    elif state.closing == STOPPED:
        bad = BadInput("group-stopped", f"group {gid!r} is stopped (policy stop-group)")
    else:
        bad = BadInput(
            "room-late", f"group {gid!r} is open with parked messages left (would reorder)"
        )
    log.warning("dead-lettering %d parked records of group %r: %s", len(parked), gid, bad)
    for p in parked:
        if p.close or p.skip:
            continue  # a marker: no message of the sender's to dead-letter
        item = Item(p.m, p.headers(), None)
        out.records.append(d.emitter.dead_letter(item, p.bad or bad, now_ms, p.source()))
        out.lettered(p.bad or bad)
    marker(d, tp, gid, parked[-1].m.offset(), out, batch)


def close_stopped(d: Draining, gid: str, parked: list[Parked], dest: str, out: Output) -> None:
    """A group stopped (policy stop-group) while admitted to `dest`: the drain alone writes
    that destination, so it closes the group there, after whatever it forwarded of it (send
    side: a close marker), and the batch's settle frees the destination (`out.stopped`).
    The routing unit parked the poison message behind the others instead
    (`router/table/store/lua/route.lua`)."""
    if d.spec.side == "send":
        # its own headers, for the band the group's records went to (router.unit.steps.bands)
        last = next((p for p in reversed(parked) if priority.stamped_band(p.headers())), parked[-1])
        bad = BadInput("group-stopped", f"group {gid!r} is stopped (policy stop-group)")
        bad.guarantee_id = gid
        item = Item(last.m, last.headers(), None, bad)
        out.records.append(d.emitter.close_marker(item, dest, out, last.token))
    out.stopped.append(gid)


def marker(
    d: Draining,
    tp: TP,
    gid: str,
    through: int,
    out: Output,
    batch: Batch,
    next_seq: int = -1,
    origin: str = "",
) -> None:
    headers = [
        (contract.CONTROL, contract.DRAINED),
        (contract.ROOM, gid.encode()),
        (contract.THROUGH, str(through).encode()),
    ]
    if next_seq >= 0:
        headers.append((contract.NEXT_SEQ, str(next_seq).encode()))
        headers.append((contract.ORIGIN, origin.encode()))
    out.records.append(new_record(Record, (tp[0], tp[1], None, None, headers, 0, None)))
    batch.extra.setdefault("drained", {})[(tp, gid)] = (
        through,
        next_seq if next_seq >= 0 else None,
        origin,
    )


def drained(d: Draining, out: Output, tp: TP, drain: tuple[str, int, int]) -> None:
    """A drain for the settle (`router.table.room.drained`), with this unit's claim on its
    room partition as it is now: the settle's drains are fenced by it, so that a zombie's
    late settle opens nothing (`router.table.store.settling`). A partition this unit holds
    no claim on (its claim refused at the assignment, not taken since) is not fenced."""
    out.drains.append(drain)
    lane = lane_of(*tp)
    token = d.claim_of(lane)
    if token is not None:
        out.drain_claims[lane] = token
