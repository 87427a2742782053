"""How a management table is spelled in Redis: its keys, its entries, the route script's
arguments and the Lua scripts themselves (no I/O here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from router.table.routing import Entry, RouteRequest, Swept

Side = Literal["send", "receive"]


def script(name: str) -> str:
    """A script of `router/table/store/lua/`, after the shared prelude (`prelude.lua`: the entry
    codec and the waiting room's admission)."""
    lua = resources.files("router.table.store").joinpath("lua")
    return lua.joinpath("prelude.lua").read_text("utf-8") + lua.joinpath(f"{name}.lua").read_text(
        "utf-8"
    )


def decode_entry(raw: bytes | str) -> Entry:
    """'dest|opened|updated|ttl|closing|lane', then '|state|parks' for a group in the
    waiting room (`router.table.room`), then '|next|fence|origin' for a group in logical order
    (next -1 if not), then '|routed' once a lane-order member with a sequence number went
    straight to the destination ('' if none), then '|parked|unstaged' once a message was
    parked (the room's replay marks); entries written before lanes have 5 fields, before
    origins 10 (`router/table/store/lua/prelude.lua` is the same codec)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    dest, opened, updated, ttl, closing, *rest = text.split("|", 13)
    entry = Entry(dest, int(opened), int(updated), int(ttl), closing, rest[0] if rest else "")
    if len(rest) >= 3:
        entry.state, entry.parks = rest[1], int(rest[2])
    if len(rest) >= 5:
        entry.next, entry.fence = int(rest[3]), rest[4]
    if len(rest) >= 6:
        entry.origin = rest[5]
    if len(rest) >= 7 and rest[6]:
        entry.routed = int(rest[6])
    if len(rest) >= 9:
        entry.parked, entry.unstaged = rest[7], rest[8]
    return entry


def encode(r: RouteRequest) -> tuple[str, str, str]:
    """One request as the route script reads it (see `router/table/store/lua/route.lua`): three
    values, guarantee ID ('' = ordinary), kind and position. The kind, "flags|TTL|lane",
    repeats from message to message (the script reads each distinct one once); the
    position, "<lane order's number>=<token>", is the message's own (the number '' if
    none, or in logical order, or unreadable: below 0). The only place that spells the
    flags."""
    flags = (
        ("f" if r.final else "")
        + ("s" if r.force_share else "")
        + ("d" if r.dead else "")
        + ("p" if r.poison_stop else "")
        + ("c" if r.continuation else "")
        + ("k" if r.close else "")
        + ("g" if r.complete else "")
        + (f"l{r.seq}" if r.seq is not None else "")
    )
    # lane order's number, only recorded (logical order's `l` already says it)
    seq = r.lane_seq if r.lane_seq is not None and r.lane_seq >= 0 and r.seq is None else None
    q = "" if seq is None else str(seq)
    if r.targets:  # multicast: an ordinary message, the token its target queues
        return ("", f"{flags}m|{r.ttl_ms}|{r.lane}", f"{q}={','.join(r.targets)}")
    return (r.guarantee_id or "", f"{flags}|{r.ttl_ms}|{r.lane}", f"{q}={r.token}")


def text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


@dataclass(frozen=True, slots=True)
class TableKeys:
    entries: str
    deadlines: str
    load: str
    cursor: str
    closing: str
    outbox: str
    stats: str
    inflight: str
    epoch: str
    writes: str
    room: str  # zset: waiting group -> wait start (ms)
    parks: str  # zset: "batch|group" -> park lease expiry (ms)
    admitted: str  # hash: admitted group -> its reserved destination
    writers: str  # hash: caller -> the write count of its last route call
    # logical order: a finished group -> "next|expiry ms" (a later member below `next` is a
    # duplicate until then), and the same expiries as a zset for pruning
    done: str
    done_at: str
    draining: str  # set: destinations nothing new is placed on (`router.table.placement`)
    # send side, priority bands (`router.unit.steps.bands`): group -> 'band|call', its last use,
    # calls
    bands: str
    bands_at: str
    bands_calls: str
    # wait time-outs under routing.wait_timeout_policy "report": the wait start up to which
    # they were reported (each group once)
    waited: str
    # lane (source or room partition) -> the token of its latest claim by a unit
    # (`router.table.store.owners`): calls with an older token are refused
    owners: str
    # list: GroupWaitTimedOut events the sweeper has not had acknowledged by Kafka yet,
    # "<now ms>|<outcome>|<guarantee ID>" (`room_timeout.lua` appends, `router.sweeper.publish`)
    waits_out: str

    @classmethod
    def of(cls, prefix: str, topology: str, side: Side) -> TableKeys:
        base = f"{prefix}:{{{topology}:{side}}}"
        return cls(*(f"{base}:{name}" for name in cls.__dataclass_fields__))

    def all(self) -> list[str]:
        return [getattr(self, name) for name in self.__dataclass_fields__]

    def named(self, names: str) -> list[str]:
        """The keys named (space-separated), in that order: a script's KEYS."""
        return [getattr(self, name) for name in names.split()]


def outbox_item(raw: bytes | str) -> Swept:
    """An outbox item: JSON {"e": entry, "t": swept at, "g": guarantee ID}, or the
    older "entry|swept_at|gid" (an entry of 5 or 6 fields)."""
    item = text(raw)
    if item.startswith("{"):
        fields = json.loads(item)
        return Swept(fields["g"], decode_entry(fields["e"]), int(fields["t"]))
    n = 5 if item.split("|", 6)[5].isdigit() else 6
    parts = item.split("|", n + 1)
    return Swept(parts[n + 1], decode_entry("|".join(parts[:n])), int(parts[n]))
