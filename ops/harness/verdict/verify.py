"""Check what the destinations hold against what the senders sent (pure logic, no I/O).

Every record is identified by its payload (event ID, group, position in the group), not
by router headers, and judged from what the destinations hold, never from the router's
counters or logs, so a router bug cannot hide itself. Counts, on the receive queues:

* lost: sent and acknowledged, never received; duplicated: extra copies received (a copy
  counts only as a duplicate: order, interleaving and completeness are judged on first
  copies, the earliest appended);
* reordered: a group's message received after a later message of the same group, on
  the same band topic of the same queue (position = offset);
* split: a group whose messages reached more than one receive queue, or more than one
  band topic of a queue (priority bands, `ops.harness.verdict.bands`);
* unexpected: received but never sent (leftovers of another run would show here);
* interleaved: a message received inside another group's open span on its queue (with
  priority bands: its band topics merged by append time, `ops.harness.verdict.bands.merged`);
* whole groups released before their final or not contiguous, logical-order groups not
  restored to sequence (`ops.harness.verdict.features`);
* wrong band (with priority bands): a record on a band topic other than the one its
  priority maps to, a group member's being its group's first member's
  (`ops.harness.verdict.bands.judge_bands`, both sides).

A multicast message (`Sent.queues`: its target receive queues) is expected once on each
of them: each copy is judged as its own ordinary message (lost, duplicated on its queue,
unexpected on a queue it did not target), named `<event ID>@<queue>`, and its receive-side
decision window starts where the message's one copy on the transfer topic was appended.

A message with a lifetime (`Sent.expires`) is delivered or expired: with what the events
and dead-letter topics hold (`expired`, `dead`), every message must be delivered, expired
or dead-lettered, each exactly one of them (`ops.harness.verdict.accounts`); an expired member
counts as present when its group's completeness is judged.

With what the transfer topic holds and every record's append time, the interleavings of
both sides are judged by the capacity rule (`ops.harness.verdict.capacity`): one it does not
allow is a broken guarantee, whatever the busy policy; without append times, every
interleaving is (both sides: `ops.harness.verdict.sides`). The records judged, `Sent` and
`Seen`, are `ops.harness.verdict.records`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from ops.harness.verdict.accounts import Accounts, ExpiredSeen, LetterSeen, account
from ops.harness.verdict.bands import BandReport, judge_bands, lane_name, merged
from ops.harness.verdict.capacity import SideReport
from ops.harness.verdict.features import FeatureReport, judge_features
from ops.harness.verdict.records import Seen, Sent, copy_id, first_copies
from ops.harness.verdict.sides import CapacitySpec, judge_sides


@dataclass
class Report:
    sent: int = 0  # deliveries expected: a multicast message counts once per target queue
    received: int = 0
    multicast_sent: int = 0  # multicast messages (their copies are in `sent`)
    multicast_copies: int = 0  # ... and their copies
    groups_sent: int = 0
    groups_complete: int = 0  # every message of the group received, on one queue, in order
    ordinary_sent: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    reordered: int = 0
    split_groups: int = 0
    interleaved: int = 0  # on the receive queues, judged or not
    queues_used: int = 0
    lost_examples: list[str] = field(default_factory=list)
    split_examples: list[str] = field(default_factory=list)
    reorder_examples: list[str] = field(default_factory=list)
    # Each duplicated event's copies, on both sides: where the second copy came from.
    duplicate_examples: list[str] = field(default_factory=list)
    send: SideReport | None = None  # the capacity rule's verdict per side (None: not judged)
    receive: SideReport | None = None
    accounts: Accounts | None = None  # expired and dead-lettered (None: not read)
    bands: BandReport | None = None  # priority bands: where messages landed, wrong bands
    features: FeatureReport | None = None  # whole groups, logical order (None: none sent)

    @property
    def sides(self) -> list[SideReport]:
        return [s for s in (self.send, self.receive) if s is not None]

    def violations(self) -> list[str]:
        """Broken guarantees: an interleaving is one unless the capacity rule allowed it."""
        out = []
        for name in ("lost", "duplicated", "unexpected", "reordered", "split_groups"):
            if getattr(self, name):
                out.append(f"{name}={getattr(self, name)}")
        for side in self.sides:
            if side.disallowed:
                out.append(f"{side.side} side: {side.disallowed} disallowed interleavings")
        if self.receive is None and self.interleaved:
            out.append(f"interleaved={self.interleaved}, not judged by the capacity rule")
        if self.accounts is not None:
            out += self.accounts.violations()
        if self.bands is not None:
            out += self.bands.violations()
        if self.features is not None:
            out += self.features.violations()
        return out

    @property
    def accounted(self) -> int:
        """Deliveries expected and not lost: received (first copies) or accounted for."""
        return self.sent - self.lost


def duplicate_examples(
    received: Sequence[Seen], forwarded: Iterable[Seen] | None, most: int = 5
) -> list[str]:
    """Up to `most` events received more than once, each with every copy on the receive
    queues and on the transfer topic (queue@offset, append time): two copies upstream put
    the second copy before the send side (a sender), one upstream after it (a unit)."""
    copies: dict[str, list[Seen]] = defaultdict(list)
    for r in received:
        copies[r.event_id].append(r)
    twice = sorted(e for e, c in copies.items() if len(c) > 1)[:most]
    upstream: dict[str, list[Seen]] = defaultdict(list)
    for r in forwarded if forwarded is not None else ():
        if r.event_id in twice:
            upstream[r.event_id].append(r)

    def where(rs: list[Seen]) -> str:
        return ", ".join(f"{r.queue}@{r.offset} (appended {r.append_ms})" for r in rs)

    return [
        f"{e}: received {where(copies[e])}; transfer topic {where(upstream[e]) or 'not read'}"
        for e in twice
    ]


def verify(
    sent: Iterable[Sent],
    seen: Iterable[Seen],
    *,
    forwarded: Iterable[Seen] | None = None,
    capacity: CapacitySpec | None = None,
    expired: Iterable[ExpiredSeen] | None = None,
    dead: Iterable[LetterSeen] | None = None,
    bands: int = 1,
) -> Report:
    """Judge `seen` (what the receive queues hold) against `sent`. With `forwarded` (what
    the transfer topic holds) and `capacity`, judge both sides' interleavings by the
    capacity rule; every record then needs its append time. With `expired` and `dead`
    (the ExpiredMessage events and dead letters), account for every message. `bands`:
    the topology's priority bands (`Seen.band` says which band topic a record is on)."""
    report = Report()
    sent = list(sent)
    forwarded = None if forwarded is None else list(forwarded)
    expected: dict[str, Sent] = {}
    group_sizes: dict[str, int] = defaultdict(int)
    copied: dict[str, tuple[str, ...]] = {}  # multicast event ID -> its target queues
    for s in sent:
        if s.queues is not None:
            copied[s.event_id] = s.queues
            report.multicast_sent += 1
            report.multicast_copies += len(s.queues)
            for q in s.queues:
                expected[copy_id(s.event_id, q)] = s
        else:
            expected[s.event_id] = s
        if s.group is None:
            report.ordinary_sent += 1
        else:
            group_sizes[s.group] += 1
    report.sent = len(expected)
    report.groups_sent = len(group_sizes)

    received = [
        replace(r, event_id=copy_id(r.event_id, r.queue)) if r.event_id in copied else r
        for r in seen
    ]
    report.received = len(received)
    report.queues_used = len({r.queue for r in received})
    firsts, report.duplicated = first_copies(received)
    if report.duplicated:
        report.duplicate_examples = duplicate_examples(received, forwarded)
    report.unexpected = sum(1 for r in firsts if r.event_id not in expected)
    delivered = {r.event_id for r in firsts}
    accounted: set[str] = set()
    if expired is not None or dead is not None:
        lifetimes = {s.event_id: s.expires for s in sent}
        report.accounts, accounted = account(lifetimes, delivered, expired or (), dead or ())
    missing = sorted(set(expected) - delivered - accounted)
    report.lost, report.lost_examples = len(missing), missing[:5]

    by_queue: dict[str, list[Seen]] = defaultdict(list)
    for r in firsts:
        by_queue[r.queue].append(r)
    queues_of: dict[str, set[str]] = defaultdict(set)  # group -> the band topics it is on
    got: dict[str, set[int]] = defaultdict(set)
    bad: set[str] = set()
    for queue, unordered in by_queue.items():
        records = merged(unordered)  # each band topic in offset order, merged by append time
        report.interleaved += _interleaved(records)
        highest: dict[tuple[str, int], int] = {}  # (group, band) -> highest seq so far
        for r in records:
            if r.group is None:
                continue
            g, lane = r.group, (r.group, r.band)
            queues_of[g].add(lane_name(queue, r.band))
            if lane in highest and r.seq < highest[lane]:
                report.reordered += 1
                bad.add(g)
                if len(report.reorder_examples) < 5:
                    report.reorder_examples.append(
                        f"{g}: {r.seq} after {highest[lane]} on {lane_name(queue, r.band)}"
                    )
            highest[lane] = max(highest.get(lane, -1), r.seq)
            got[g].add(r.seq)
    for g, queues in queues_of.items():
        if len(queues) > 1:
            report.split_groups += 1
            bad.add(g)
            if len(report.split_examples) < 5:
                report.split_examples.append(f"{g} on {sorted(queues)}")
    for s in sent:
        if s.group is not None and s.event_id in accounted:
            got[s.group].add(s.seq)  # expired (or dead-lettered: a violation of its own)
    report.groups_complete = sum(
        1 for g, size in group_sizes.items() if g not in bad and got[g] == set(range(size))
    )
    of = {**{s.event_id: s for s in sent}, **expected}  # a multicast copy: its message
    upstream = None if forwarded is None else first_copies(forwarded)[0]
    report.bands = judge_bands(sent, of, firsts, upstream, bands)
    if any(s.whole or s.logical for s in sent):
        sides = [] if upstream is None else [("send", upstream)]
        report.features = judge_features(sent, [*sides, ("receive", firsts)])
    if forwarded is not None and capacity is not None:
        origin = {copy_id(e, q): e for e, queues in copied.items() for q in queues}
        report.send, report.receive = judge_sides(firsts, list(forwarded), capacity, origin, sent)
    return report


def _interleaved(records: Sequence[Seen]) -> int:
    """Records inside another group's open span (one queue, in offset order)."""
    count = 0
    opened: set[str] = set()
    seen: set[str] = set()
    for r in records:
        count += bool(opened - {r.group} if r.group is not None else opened)
        if r.group is None:
            continue
        if r.group not in seen:
            seen.add(r.group)
            if not r.final:
                opened.add(r.group)
        elif r.final:
            opened.discard(r.group)
    return count
