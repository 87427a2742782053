"""A receiver's band holds after it takes queues over (router/receiver/bands.py).

Which band a queue's open group is in lives in the receiver's memory. A receiver that
takes a queue over (restarted, or given the partitions in a rebalance) finds it in the
data instead: on each band topic partition, the last record before the committed offset.
If that record is a member of a group and not its final, the previous owner handed the
group out part way, so the queue's other bands must wait until the group's final (or its
TTL): an older record of a lower band would otherwise come between the members handed
out before and the rest. Receive queues hold data records only (the router's control
records stay on the transfer topic), so the last record says it all; a group written in
an aborted transaction is not seen (read_committed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from router.contract.priority import split
from router.receiver.received import Received, from_message

log = logging.getLogger("router.receiver")

PEEK_BACK = 16  # offsets read back from the committed one: transaction markers take some
PEEK_TIMEOUT_S = 10.0


def open_member(records: Iterable[Received]) -> Received | None:
    """The last record of a band partition before its committed offset (`records` in
    offset order), if it is a group's member other than its final."""
    last = None
    for m in records:
        last = m
    if last is None or last.guarantee_id is None or last.final:
        return None
    return last


def open_groups(
    found: Mapping[tuple[str, int], Received | None], bases: Iterable[str]
) -> dict[str, tuple[int, Received]]:
    """queue -> (band, the open group's last member handed out), from each band partition's
    `open_member`. Two open on one queue (only if the busy policy shared it): the one
    appended last holds, as the router wrote it last."""
    out: dict[str, tuple[int, Received]] = {}
    names = frozenset(bases)
    for (topic, _), m in sorted(found.items()):
        if m is None:
            continue
        queue, band = split(topic, names)
        held = out.get(queue)
        if held is None or (m.timestamp_ms or 0) > (held[1].timestamp_ms or 0):
            out[queue] = (band, m)
    return out


def peek(
    config: Mapping[str, Any], committed: Sequence[TopicPartition]
) -> dict[tuple[str, int], Received | None]:
    """Each partition's `open_member`, read with its own short-lived consumer (`config`:
    the receiver's, read_committed; it never commits). A partition nothing was committed
    on, or one that cannot be read in time, counts as having no open group (logged)."""
    out: dict[tuple[str, int], Received | None] = {}
    wanted = [tp for tp in committed if tp.offset > 0]
    if not wanted:
        return out
    consumer = Consumer({**config, "enable.auto.commit": False, "enable.auto.offset.store": False})
    try:
        starts = []
        for tp in wanted:
            low, _ = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), 5)
            starts.append(TopicPartition(tp.topic, tp.partition, max(low, tp.offset - PEEK_BACK)))
        ends = {(tp.topic, tp.partition): tp.offset for tp in wanted}
        records: dict[tuple[str, int], list[Received]] = {k: [] for k in ends}
        left = {(s.topic, s.partition) for s in starts if s.offset < ends[(s.topic, s.partition)]}
        consumer.assign(starts)
        deadline = time.monotonic() + PEEK_TIMEOUT_S
        while left and time.monotonic() < deadline:
            for m in consumer.consume(100, 0.2):
                key = (m.topic(), m.partition())
                if m.error() is not None or key not in left:
                    continue
                if m.offset() >= ends[key]:
                    left.discard(key)
                    continue
                records[key].append(from_message(m))
                if m.offset() >= ends[key] - 1:
                    left.discard(key)
            for key in list(left):  # nothing more below the committed offset (markers)
                position = consumer.position([TopicPartition(*key)])[0].offset
                if position >= ends[key]:
                    left.discard(key)
        for key in left:
            log.warning("%s[%d]: could not read back to see whether a group was open", *key)
        out = {k: open_member(v) for k, v in records.items() if k not in left}
    except KafkaException as exc:
        log.warning("could not read back the band partitions taken over: %s", exc)
    finally:
        consumer.close()
    return out
