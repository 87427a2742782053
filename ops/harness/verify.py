"""Check what the receivers got against what the senders sent (pure logic, no I/O).

Every record is identified by its payload (event ID, group, position in the group), not
by router headers, so a router bug cannot hide itself. Counts:

* lost: sent and acknowledged, never received; duplicated: extra copies received (a copy
  counts only as a duplicate: order, interleaving and completeness are judged on first
  copies);
* reordered: a group's message received after a later message of the same group, on
  the same queue (position in the queue = offset);
* split: a group whose messages reached more than one receive queue;
* interleaved: a message received on a queue while another group was open there
  (between that group's first and final message);
* unexpected: received but never sent (leftovers of another run would show here).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Sent:
    event_id: str
    group: str | None
    seq: int
    final: bool


@dataclass(frozen=True, slots=True)
class Seen:
    queue: str
    offset: int
    event_id: str
    group: str | None
    seq: int
    final: bool
    latency_ms: float | None = None


@dataclass
class Report:
    sent: int = 0
    received: int = 0
    groups_sent: int = 0
    groups_complete: int = 0  # every message of the group received, on one queue, in order
    ordinary_sent: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    reordered: int = 0
    split_groups: int = 0
    interleaved: int = 0
    interleaved_groups: int = 0
    queues_used: int = 0
    lost_examples: list[str] = field(default_factory=list)
    split_examples: list[str] = field(default_factory=list)
    reorder_examples: list[str] = field(default_factory=list)

    def violations(self, interleaving_allowed: bool) -> list[str]:
        """Broken guarantees. Interleaving is allowed only if the router had to share a
        busy destination (policy share, more open groups than destinations)."""
        out = []
        for name in ("lost", "duplicated", "unexpected", "reordered", "split_groups"):
            if getattr(self, name):
                out.append(f"{name}={getattr(self, name)}")
        if self.interleaved and not interleaving_allowed:
            out.append(f"interleaved={self.interleaved} with no busy destination shared")
        return out


def verify(sent: Iterable[Sent], seen: Iterable[Seen]) -> Report:
    report = Report()
    expected: dict[str, Sent] = {}
    group_sizes: dict[str, int] = defaultdict(int)
    for s in sent:
        expected[s.event_id] = s
        if s.group is None:
            report.ordinary_sent += 1
        else:
            group_sizes[s.group] += 1
    report.sent = len(expected)
    report.groups_sent = len(group_sizes)

    copies: dict[str, int] = defaultdict(int)
    by_queue: dict[str, list[Seen]] = defaultdict(list)
    for r in seen:
        report.received += 1
        copies[r.event_id] += 1
        by_queue[r.queue].append(r)
    report.queues_used = len(by_queue)
    report.duplicated = sum(n - 1 for n in copies.values() if n > 1)
    report.unexpected = sum(1 for e in copies if e not in expected)
    missing = [e for e in expected if e not in copies]
    report.lost = len(missing)
    report.lost_examples = sorted(missing)[:5]

    queues_of: dict[str, set[str]] = defaultdict(set)
    good_groups: dict[str, set[int]] = defaultdict(set)
    bad_groups: set[str] = set()
    first_copy: set[tuple[str, int]] = set()
    seen_ids: set[str] = set()
    for r in sorted((r for rs in by_queue.values() for r in rs), key=lambda r: (r.queue, r.offset)):
        if r.event_id not in seen_ids:
            seen_ids.add(r.event_id)
            first_copy.add((r.queue, r.offset))
    for queue, records in by_queue.items():
        records.sort(key=lambda r: r.offset)
        highest: dict[str, int] = {}
        open_groups: set[str] = set()
        interleaved: set[str] = set()
        for r in records:
            if (queue, r.offset) not in first_copy:
                continue  # a re-delivered copy: counted as a duplicate above
            others = open_groups - {r.group} if r.group is not None else open_groups
            if others:
                report.interleaved += 1
                interleaved |= others
                if r.group is not None:
                    interleaved.add(r.group)
            if r.group is None:
                continue
            g = r.group
            queues_of[g].add(queue)
            if g in highest and r.seq < highest[g]:
                report.reordered += 1
                bad_groups.add(g)
                if len(report.reorder_examples) < 5:
                    report.reorder_examples.append(f"{g}: {r.seq} after {highest[g]} on {queue}")
            highest[g] = max(highest.get(g, -1), r.seq)
            good_groups[g].add(r.seq)
            open_groups.add(g)
            if r.final:
                open_groups.discard(g)
        report.interleaved_groups += len(interleaved)
    for g, queues in queues_of.items():
        if len(queues) > 1:
            report.split_groups += 1
            bad_groups.add(g)
            if len(report.split_examples) < 5:
                report.split_examples.append(f"{g} on {sorted(queues)}")
    report.groups_complete = sum(
        1
        for g, size in group_sizes.items()
        if g not in bad_groups and good_groups.get(g) == set(range(size))
    )
    return report
