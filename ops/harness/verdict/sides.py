"""The capacity rule over both sides of a run (pure logic, no I/O): which destinations each
side has and what may have held releases up (`CapacitySpec`), and every first copy on the
transfer topic (send side) and on the receive queues (receive side) as a placement with
its decision window (`judge_sides`), judged by `ops.harness.verdict.capacity`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ops.harness.verdict.bands import lane_name
from ops.harness.verdict.capacity import (
    RELEASE_SLACK_MS,
    Disturbance,
    Placed,
    SideReport,
    judge_side,
)
from ops.harness.verdict.records import Seen, Sent, first_copies
from ops.harness.verdict.visibility import Visibility


@dataclass(frozen=True)
class CapacitySpec:
    """Every destination of each side (one that received nothing is never occupied, so
        it disallows every interleaving of its side), the release slack, and what the driver
        did that may have held releases up (kills, server restarts), and, if the run sampled
    them, when records became visible to read_committed readers."""

    send_destinations: tuple[str, ...]
    receive_destinations: tuple[str, ...]
    release_slack_ms: int = RELEASE_SLACK_MS
    disturbances: tuple[Disturbance, ...] = ()
    # when each record became visible (a run's LSO samples): releases counted from there
    visibility: Visibility | None = None


def judge_sides(
    received: Sequence[Seen],
    forwarded: Sequence[Seen],
    capacity: CapacitySpec,
    origin: Mapping[str, str] | None = None,
    sent: Sequence[Sent] = (),
) -> tuple[SideReport, SideReport]:
    """The capacity rule on both sides: `forwarded` = what the transfer topic holds (send
    side), `received` = what the receive queues hold (receive side). The decision window
    of a record starts, on the send side, at the sender's create time; on the receive
    side, at the append time of its first copy on the transfer topic (an event never seen
    there: its create time, the earliest anything could have decided it). `origin`: a
    multicast copy's ID -> its message's ID (on the transfer topic).

    A group's member that never reaches a side's destination (expired or dead-lettered
    there) is still routed, so that its group stays whole: the table puts the group in
    charge of its destination from that member's decision, before anything of the group
    is on it. So a group's occupancy starts at the earliest instant any of its members
    could have been decided on the side: send side, the earliest create time `sent`
    records; receive side, the earliest append time of its members on the transfer
    topic."""
    upstream, _ = first_copies(forwarded)
    copies = origin or {}
    send_from: dict[str, int] = {}
    for s in sent:
        if s.group is not None and s.created_ms is not None:
            send_from[s.group] = min(send_from.get(s.group, s.created_ms), s.created_ms)
    for r in upstream:
        if r.group is not None:
            send_from[r.group] = min(send_from.get(r.group, _created(r)), _created(r))
    receive_from: dict[str, int] = {}
    for r in upstream:
        if r.group is not None:
            receive_from[r.group] = min(receive_from.get(r.group, _appended(r)), _appended(r))
    send = judge_side(
        "send",
        [_placed(r, _created(r), visible=capacity.visibility) for r in upstream],
        capacity.send_destinations,
        capacity.release_slack_ms,
        capacity.disturbances,
        send_from,
    )
    appended = {r.event_id: _appended(r) for r in upstream}
    receive = judge_side(
        "receive",
        [
            _placed(
                r,
                appended.get(copies.get(r.event_id, r.event_id), _created(r)),
                copies,
                capacity.visibility,
            )
            for r in first_copies(received)[0]
        ],
        capacity.receive_destinations,
        capacity.release_slack_ms,
        capacity.disturbances,
        receive_from,
    )
    return send, receive


def _appended(r: Seen) -> int:
    if r.append_ms is None:
        raise ValueError(f"no append time for {r.event_id} on {r.queue}@{r.offset}")
    return r.append_ms


def _created(r: Seen) -> int:
    return r.created_ms if r.created_ms is not None else _appended(r)


def _placed(
    r: Seen,
    from_ms: int,
    copies: Mapping[str, str] | None = None,
    visible: Visibility | None = None,
) -> Placed:
    """A first copy as the capacity rule places it; a final's visibility if sampled (the
    only records whose visibility the rule uses: their groups' releases follow it)."""
    copy = copies is not None and r.event_id in copies
    seen = visible.at(lane_name(r.queue, r.band), r.offset) if visible and r.final else None
    return Placed(
        r.queue, r.offset, r.event_id, r.group, r.final, from_ms, _appended(r), copy, r.band, seen
    )
