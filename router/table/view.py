"""A management table as operators read it (`router table list|show`): entries with their
state, age and place in the waiting room, and the text the CLI prints. Reads only."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from router.errors import InvalidRequest
from router.state.groups import GroupStatus
from router.state.sender import GroupRecord
from router.table import room
from router.table.placement import PINNED
from router.table.routing import STOPPED, Entry
from router.table.store.management import ManagementTable


class UnknownState(InvalidRequest):
    """A table entry state that does not exist (one of `STATES`)."""


STATES = ("open", "closing", "waiting", "staged", "admitted", "stopped", PINNED)


def state_of(e: Entry) -> str:
    """One word for an entry: stopped, pinned, waiting, staged, admitted, closing or open."""
    if e.closing == STOPPED:
        return "stopped"
    if e.state != room.OPEN:
        return e.state
    return "closing" if e.closing else "open"


@dataclass(frozen=True, slots=True)
class EntryView:
    """An entry as operators see it (times in seconds, on the Redis clock)."""

    side: str
    guarantee_id: str
    destination: str  # "!" if none (waiting, staged, stopped before it had one)
    state: str
    lane: str
    age_s: float  # since the entry was created
    # since its update time: its last message's, rounded up to a step of TTL / 16 (the
    # route script writes a busy group's entry once per step), so 0 within that step
    idle_s: float
    ttl_s: float
    expires_in_s: float  # until its deadline (update time + TTL): swept after, if idle
    parks: int  # messages parked in the waiting room
    closing: str  # the routed final's source position, or "!stop"
    room: str | None  # "waiting", "admitted" or "staged" if in the waiting room
    waiting_s: float | None  # since it joined the room's queue (waiting groups)
    # The last sequence number routed straight to the destination. Logical order: from
    # the entry's next number (-1: none yet). Lane order: the number the last member routed
    # straight carried (`Entry.routed`; a replay after an abort may show a lower one
    # again), as of the entry's last write: a busy group's may lag by the members routed
    # within the current step of TTL / 16 (`router.table.routing.updated_at`; a new
    # group and a final always write it); None if it carried none, or if every member so
    # far went through the waiting room (a sender's record and receivers' statuses have
    # theirs).
    seq_routed: int | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def view(
    side: str, gid: str, e: Entry, now_ms: int, waiting: dict[str, int] | None = None
) -> EntryView:
    st = state_of(e)
    since = (waiting or {}).get(gid)
    return EntryView(
        side,
        gid,
        e.dest,
        st,
        e.lane,
        (now_ms - e.opened_ms) / 1000,
        max(0, now_ms - e.updated_ms) / 1000,
        e.ttl_ms / 1000,
        (e.deadline_ms - now_ms) / 1000,
        e.parks,
        e.closing,
        e.state if e.state in (room.WAITING, room.ADMITTED, room.STAGED) else None,
        None if since is None else (now_ms - since) / 1000,
        e.next - 1 if e.next >= 0 else e.routed,
    )


def entries(
    t: ManagementTable, side: str, destination: str | None = None, state: str | None = None
) -> list[EntryView]:
    """The side's entries, least recently used first, optionally only those on
    `destination` or in `state` (one of STATES)."""
    if state is not None and state not in STATES:
        raise UnknownState(f"unknown state {state!r}: one of {', '.join(STATES)}")
    now, waiting = t.now_ms(), t.room()
    out = [view(side, g, e, now, waiting) for g, e in t.entries().items()]
    out = [
        v
        for v in out
        if (destination is None or v.destination == destination)
        and (state is None or v.state == state)
    ]
    return sorted(out, key=lambda v: (-v.idle_s, v.guarantee_id))


def show(t: ManagementTable, side: str, gid: str) -> EntryView | None:
    e = t.entry(gid)
    return None if e is None else view(side, gid, e, t.now_ms(), t.room())


def list_lines(
    t: ManagementTable, side: str, topology: str, views: list[EntryView], limit: int, filtered: bool
) -> list[str]:
    """`router table list` for one side: entries, loads, draining destinations, batches
    in flight, counters, then the waiting room."""
    what = "entries (filtered)" if filtered else "open groups"
    out = [
        f"{side} table of topology {topology!r}: {len(views)} {what}",
        f"{'guarantee ID':32} {'destination':24} {'idle s':>8} {'ttl s':>8}  state",
    ]
    for v in views[:limit]:
        out.append(
            f"{v.guarantee_id[:32]:32} {v.destination[:24]:24} {v.idle_s:8.1f} "
            f"{v.ttl_s:8.1f}  {v.state}"
        )
    inflight = sorted({dest for dest, _ in t.inflight()})
    out += [
        "load (open groups per destination): " + json.dumps(t.loads(), sort_keys=True),
        "draining: " + (", ".join(sorted(t.draining())) or "-"),
        "ordinary messages in flight to: " + (", ".join(inflight) or "-"),
        "counters: " + json.dumps(t.stats(), sort_keys=True),
    ]
    return out + room_lines(t, limit)


def room_lines(t: ManagementTable, limit: int) -> list[str]:
    """The waiting room (busy policy `wait`): waiting groups oldest first, then the
    admitted ones whose parked messages are being drained, then the staged ones (whole-group
    delivery, until their final)."""
    now, entries = t.now_ms(), t.entries()
    waiting, admitted = t.room(), t.admitted()
    staged = sorted((e.opened_ms, g) for g, e in entries.items() if e.state == room.STAGED)
    out = [
        f"waiting room: {len(waiting)} waiting, {len(admitted)} admitted (draining), "
        f"{len(staged)} staged (whole groups until their final)"
    ]
    if not waiting and not admitted and not staged:
        return out
    shown = [*list(waiting)[:limit], *list(admitted)[:limit], *(g for _, g in staged[:limit])]
    states = t.room_state(shown)
    out.append(f"{'guarantee ID':32} {'waiting s':>9} {'parked':>7}  destination")
    for gid in shown:
        st = states.get(gid)
        name = f"(ordinary of {gid[1:]})" if room.is_pseudo(gid) else gid
        target = room.copy_target(gid)  # a queue's multicast copies: they wait for it
        if target is not None:
            name = "(multicast copies)"
        since = waiting.get(gid, entries[gid].opened_ms if gid in entries else None)
        age = f"{(now - since) / 1000:9.1f}" if since is not None else f"{'-':>9}"
        staging = st is not None and st.state == room.STAGED
        wait = f"(waits for {target})" if target is not None else "(waits for a free one)"
        dest = admitted.get(gid, "(staged until its final)" if staging else wait)
        out.append(f"{name:32} {age} {st.parks if st else 0:7}  {dest}")
    return out


def show_lines(side: str, gid: str, v: EntryView | None) -> list[str]:
    """`router table show` for one side."""
    if v is None:
        return [f"{side}: no entry for {gid!r}"]
    out = [
        f"{side}: {v.state} on {v.destination}, lane {v.lane or '-'}, age {v.age_s:.1f} s,"
        f" idle {v.idle_s:.1f} s, TTL {v.ttl_s:.1f} s (expires in {v.expires_in_s:.1f} s),"
        f" parked {v.parks}" + ("" if v.seq_routed is None else f", last seq routed {v.seq_routed}")
    ]
    if v.room is not None:
        since = "" if v.waiting_s is None else f", waiting {v.waiting_s:.1f} s"
        out.append(f"{side}: in the waiting room ({v.room}{since})")
    return out


def ends_json(senders: dict[str, GroupRecord], receivers: dict[str, GroupStatus]) -> dict[str, Any]:
    """The group's two ends for `table show --json`, only where recorded: `senders` (sender
    ID -> lane, next seq, ...) and `receivers` (group.id -> last seq done, complete)."""
    out: dict[str, Any] = {}
    if senders:
        out["senders"] = {k: json.loads(r.encode()) for k, r in senders.items()}
    if receivers:
        out["receivers"] = {k: asdict(v) for k, v in receivers.items()}
    return out


def ends_lines(senders: dict[str, GroupRecord], receivers: dict[str, GroupStatus]) -> list[str]:
    """The group's two ends as `router table show` prints them (nothing if unrecorded)."""
    now = time.time() * 1000
    out = [
        f"sender {k}: open on {r.topic}[{r.partition}], next seq {r.next_seq}"
        f" (acknowledged up to {r.acked_seq}), age {(now - r.opened_ms) / 1000:.1f} s"
        for k, r in senders.items()
    ]
    out += [
        f"receiver {k}: {'complete' if v.complete else 'in progress'} on"
        f" {v.queue}[{v.partition}], last seq done {v.last_seq}, {v.done_count} done"
        for k, v in receivers.items()
    ]
    return out
