"""Why a message is dead-lettered or where its group ends, from the message alone (pure):
the reasons the emitter (`router.unit.steps.emit.emitter`) builds for a group spanning
partitions or a member after its group finished, and a group's ID and a final's source
position as the table was given them."""

from __future__ import annotations

from collections.abc import Iterable

from router.contract.headers import BadInput
from router.unit.steps.batch import Item


def gid_of(item: Item) -> str:
    """The guarantee ID of an item, from its routing headers or its bad input's."""
    return (
        (item.routing.guarantee_id if item.routing else None)
        or (item.bad.guarantee_id if item.bad else None)
        or ""
    )


def token_of(item: Item) -> str:
    """A final's source position, as the route step gave it to the table."""
    m = item.m
    return f"{m.topic()}/{m.partition()}/{m.offset()}"


def spans_partitions(item: Item) -> BadInput:
    m, r = item.m, item.routing
    gid = r.guarantee_id if r is not None else None
    bad = BadInput(
        "group-spans-partitions",
        f"group {gid!r} is open on another partition than {m.topic()}[{m.partition()}]: a "
        "group's messages must come from one send-queue partition, in order (the sender "
        "library keeps a group on one); routing this one could split the group",
    )
    bad.guarantee_id = gid
    bad.seq = r.seq if r is not None else None
    return bad


def late_member(item: Item) -> BadInput:
    r = item.routing
    gid, seq = (r.guarantee_id, r.seq) if r is not None else (None, None)
    bad = BadInput(
        "duplicate-seq",
        f"group {gid!r} finished before sequence number {seq} came (a retry, or a member "
        "skipped past a gap): not delivered after the group",
    )
    bad.guarantee_id, bad.seq = gid, seq
    return bad


def cross_cell(item: Item, queues: Iterable[str]) -> BadInput:
    """A multicast message whose receive queues are not all in its cell
    (docs/explanation/cells.md): copies across cells are not built yet, and the message is
    never split silently over the queues its cell can decide."""
    targets = item.targets or ()
    outside = sorted(set(targets) - set(queues))
    r = item.routing
    bad = BadInput(
        "cross-cell",
        f"multicast to {len(targets)} receive queues, {', '.join(outside)} outside the cell of "
        f"{item.m.topic()}[{item.m.partition()}]: copies across cells are not built yet",
    )
    bad.guarantee_id = r.guarantee_id if r is not None else None
    return bad
