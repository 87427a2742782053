"""The emit step's part of multicast (`router.table.multicast`): one record per target queue of a
FANOUT decision, in the batch's one transaction, which also commits the message's
transfer-partition offset: a copy written straight to each queue in charge of no group,
and one parked in the waiting room for each other queue (drained there once the queue's
groups have ended). All or none for `read_committed` readers: a batch that aborts writes
no copy, and its replay routes the message again. No I/O."""

from __future__ import annotations

from router.table import room
from router.table.multicast import split
from router.unit.steps.batch import Item
from router.unit.steps.emit.records import TRACK_DELIVERY_BYTES, Emitting, Output, Record


def copies(emitter: Emitting, item: Item, decision: str, out: Output) -> None:
    """Add the copies of multicast `item` (key, value, timestamp and headers as they
    came) to `out`: straight ones leased like an ordinary message's destination."""
    straight, parked = split(decision)
    m = item.m
    key, value = m.key(), m.value()
    ts_type, ts = m.timestamp()
    # a large copy the broker refuses fails the batch; its replay dead-letters the message
    big = value is not None and len(value) > TRACK_DELIVERY_BYTES
    source = (m.topic(), m.partition(), m.offset()) if big else None
    for dest in straight:
        topic, partition = emitter.spec.target(dest)
        out.records.append(
            Record(topic, partition, key, value, item.headers, ts if ts_type else 0, source)
        )
        out.ordinary_dests.add(dest)
    for dest in parked:
        out.records.append(emitter.park_in_room(item, room.copy_group(dest)))
    out.forwarded += len(straight)
    out.parked_in_room += len(parked)
    out.multicast += 1
    out.multicast_copies += len(straight) + len(parked)
