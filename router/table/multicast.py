"""Multicast on the receive side's table (pure: no I/O): where each copy of a multicast
message goes (`router.contract.multicast` reads the headers; docs/explanation/multicast.md).

A copy goes straight to a target queue that is in charge of no open group (a group whose
final was routed earlier in the same batch does not count: the copy is appended after
it), leasing the queue to the batch like an ordinary message's destination. On a queue
in charge of a group, or while earlier copies for that queue still wait, the copy is
parked in the waiting room under the queue's copies pseudo-group (`room.copy_group`),
admitted to that queue, and only that queue, once it is in charge of no group
(`router.table.room.admit`); the drain step then writes it there. So a copy never lands inside
an open group's span, and one queue's copies keep their order. Every busy policy: a
copy is never shared and never holds its partition. The emit step writes the copies of
a FANOUT decision in the batch's one transaction (`router.unit.steps.emit.fanout`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from router.table import room
from router.table.routing import RouteRequest
from router.table.state import TableState

FANOUT = "!m"  # a route decision: "!m<straight,...>|<parked,...>" (receive side)


def route(
    t: TableState, r: RouteRequest, freed: Counter[str], batch: str, now_ms: int, lease_ms: int
) -> str:
    """A multicast message on the receive side: a copy straight to each target queue in
    charge of no group (but ones whose final this batch routed) with no earlier copy
    waiting, leased to the batch; the others parked behind the queue's waiting copies."""
    straight, parked = [], []
    r = dataclasses.replace(r, token="")  # the script's token is the target list: no position
    for dest in r.targets:
        gid = room.copy_group(dest)
        entry = t.entries.get(gid)
        if entry is None and t.load.get(dest, 0) == freed[dest]:
            straight.append(dest)
            t.inflight[(dest, batch)] = now_ms + lease_ms
            continue
        parked.append(dest)
        if entry is None:
            room.wait(t, gid, r, batch, now_ms, lease_ms)
        else:
            room.parked_message(t, gid, entry, r, batch, now_ms, lease_ms)
    return decision(straight, parked)


def decision(straight: Sequence[str], parked: Sequence[str]) -> str:
    return f"{FANOUT}{','.join(straight)}|{','.join(parked)}"


def split(decision: str) -> tuple[list[str], list[str]]:
    """(queues written straight, queues whose copy is parked) of a FANOUT decision."""
    straight, _, parked = decision[len(FANOUT) :].partition("|")
    return [d for d in straight.split(",") if d], [d for d in parked.split(",") if d]
