"""A unit's spans: one per traced message of each committed batch, naming its routing
decision (docs/how-to/tracing.md).

A message is traced if its producer's `traceparent` says its trace is sampled. Its span is a
child of that context (the units forward the header unchanged), begins when the unit polled
the batch and ends when the batch's transaction committed: it shows where the message's time
went at this hop, in the message's own trace, beside the Sender's and the Receiver's spans.
Why a span per message and not one per batch with links: a batch span would live in a trace
of its own, and a backend shows a message's trace without it. The batch is in the attributes
(`router.batch.id`, `messaging.batch.message_count`).

`outcome` (pure) says what became of a message; `UnitSpans.committed` records the spans, after
the commit, off the decision path (tracing off: never called, nothing per message).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from router.config.settings import RouterSettings
from router.contract import lifetime
from router.contract.priority import band_topics
from router.table.multicast import FANOUT
from router.table.room import UNSTAGED, WAIT
from router.table.routing import DUPLICATE, ORPHAN, PARKED, SPANS, STOPPING
from router.topology.side import SideSpec
from router.tracing.context import Parent, traced
from router.tracing.setup import spans_for
from router.unit.steps.batch import Batch, Item
from router.unit.steps.emit.records import Output

if TYPE_CHECKING:
    from router.tracing.spans import Spans

FORWARDED, WAITING, PARKED_OUT, DEAD, EXPIRED = (
    "forwarded", "waiting-room", "parked", "dead-lettered", "expired",
)  # fmt: skip
MULTICAST, DRAINED = "multicast", "drained"


def outcome(item: Item) -> tuple[str, str | None, str | None] | None:
    """(outcome, destination, dead-letter reason) of a message the batch committed; None
    for a close or skip marker (no message of the sender's)."""
    if item.skip or item.close:
        return None
    dest, bad = item.decision, item.bad
    if dest in (PARKED, ORPHAN) or (dest is not None and dest.startswith(STOPPING)):
        reason = bad.code if bad else "group-entry-missing" if dest == ORPHAN else "group-stopped"
        return (EXPIRED if reason == lifetime.EXPIRED else PARKED_OUT), None, reason
    if dest == SPANS:
        return DEAD, None, bad.code if bad else "group-spans-partitions"
    if dest == DUPLICATE:
        return DEAD, None, bad.code if bad else "duplicate-seq"
    if dest in (WAIT, UNSTAGED):
        return WAITING, None, bad.code if bad else None
    if bad is not None:
        return (EXPIRED if bad.code == lifetime.EXPIRED else DEAD), None, bad.code
    if dest is None:
        return None
    if dest.startswith(FANOUT):
        straight, _, parked = dest[len(FANOUT) :].partition("|")
        return MULTICAST, ",".join(q for q in (straight, parked) if q), None
    return FORWARDED, dest, None


def item_attributes(item: Item, batch: Batch, rules: Any) -> dict[str, Any] | None:
    """The span attributes of a committed batch's message (None: no span). Only what
    varies by message: each attribute costs its encoding in every span exported, so what a
    unit shares (its side, `routing.busy_policy`) is in the resource (`UnitSpans.of`),
    and a default (not final, streamed, lane order) is left out."""
    found = outcome(item)
    if found is None:
        return None
    what, dest, reason = found
    m = item.m
    attrs: dict[str, Any] = {
        "messaging.destination.name": m.topic(),
        "messaging.destination.partition.id": str(m.partition()),
        "messaging.kafka.offset": m.offset(),
        "router.batch.id": batch.id,
        "router.outcome": what,
    }
    if dest is not None:
        attrs["router.destination"] = dest
    r, bad = item.routing, item.bad
    gid = r.guarantee_id if r is not None else bad.guarantee_id if bad else None
    if reason is not None:
        attrs["router.dead_letter.reason"] = reason
        if gid is not None:  # what the bad message does to its group
            kind = (r.message_type if r else bad.message_type if bad else None) or ""
            policy = (r.on_poison if r else bad.on_poison if bad else None) or (
                rules.poison_policy_by_type.get(kind, rules.poison_policy)
            )
            attrs["router.policy.on_poison"] = policy
    if gid is not None:
        attrs["router.guarantee_id"] = gid
        seq = r.seq if r is not None else bad.seq if bad else None
        if seq is not None:
            attrs["router.seq"] = seq
        if r is not None and r.final:
            attrs["router.final"] = True
        if r is not None and r.complete:
            attrs["router.delivery"] = "complete"
        if r is not None and r.logical:
            attrs["router.order"] = "logical"
    return attrs


class UnitSpans:
    """The spans of one unit's committed batches."""

    def __init__(self, spans: Spans, settings: RouterSettings, spec: SideSpec) -> None:
        self.spans, self.spec, self.rules = spans, spec, settings.routing
        self.room_topic = settings.topology.room_topic(spec.side)
        # a destination's Kafka topic and partition (each band's) -> its name in the table
        self.dests: dict[tuple[str, int], str] = {}
        for dest in spec.destinations:
            topic, partition = spec.target(dest)
            for band in band_topics(topic, settings.priority.bands):
                self.dests[(band, partition)] = dest

    @classmethod
    def of(
        cls, settings: RouterSettings, spec: SideSpec, role: str, instance: str
    ) -> UnitSpans | None:
        shared = {
            "messaging.system": "kafka",
            "router.topology": settings.topology.name,
            "router.side": spec.side,
            "router.policy.busy": settings.routing.busy_policy,
        }
        spans = spans_for(settings.tracing, role, instance, shared)
        return None if spans is None else cls(spans, settings, spec)

    def committed(self, batch: Batch, out: Output) -> int:
        """Record the spans of a batch whose transaction committed; how many."""
        end = time.time_ns()
        start = batch.polled_ns or end
        recorded, rules = 0, self.rules
        forwards = batch.forwards
        for item in batch.items:
            parent = traced(item.headers)
            if parent is None or not forwards(item):
                continue  # not traced; or held: replayed, its span comes with its commit
            attrs = item_attributes(item, batch, rules)
            if attrs is not None:
                self.spans.finished(f"route {item.m.topic()}", parent, start, end, attrs)
                recorded += 1
        for record in out.records[out.drain_from :] if out.drain_from >= 0 else ():
            dest = self.dests.get((record.topic, record.partition))
            parent = traced(record.headers) if dest is not None else None
            if parent is not None:
                self._drained(parent, dest or "", record.timestamp, batch, start, end)
                recorded += 1
        return recorded

    def _drained(
        self, parent: Parent, dest: str, timestamp_ms: int, batch: Batch, start: int, end: int
    ) -> None:
        """A message forwarded out of the waiting room (it was parked by an earlier batch:
        the span of that batch says `waiting-room`)."""
        attrs: dict[str, Any] = {
            "messaging.destination.name": self.room_topic,
            "router.batch.id": batch.id,
            "router.outcome": DRAINED,
            "router.destination": dest,
        }
        if timestamp_ms:
            attrs["router.message.age_ms"] = max(end // 1_000_000 - timestamp_ms, 0)
        self.spans.finished(f"drain {self.room_topic}", parent, start, end, attrs)

    def shutdown(self) -> None:
        self.spans.shutdown()
