"""Whole groups and logical order, judged from what the destinations hold (pure logic).

* A whole group (`Sent.whole`: `guarantee-delivery: complete`) must arrive whole: on each
  side (the transfer topic, the receive queues) its first record may be appended only
  once its final was sent (the router staged it until then: `released early` otherwise,
  a record appended before the sender created the final), and its records must be
  contiguous on their destination, nothing else between them (`gapped`).
* A group in logical order (`Sent.logical`) is sent scattered: its members shuffled and
  each to a random send-queue partition (`Sent.position` says where each was in its
  sender's order). It must be restored: on the receive queues, in `guarantee-seq` order
  (`not restored` otherwise; also counted as reordered by `verify`). `scattered` counts
  the groups whose members were actually sent out of sequence: a run where none was
  proves nothing about restoring the order.

A group judged here is judged on its first copies (`records.first_copies`); a lost or
split one is the main verdict's (it is neither counted ok nor a violation here).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ops.harness.verdict.bands import merged
from ops.harness.verdict.records import Seen, Sent


@dataclass
class FeatureReport:
    whole_sent: int = 0
    whole_ok: int = 0  # on every side judged: contiguous, and released after its final
    whole_early: int = 0  # (group, side) pairs: a record appended before the final was sent
    whole_gapped: int = 0  # (group, side) pairs: something else between its records
    logical_sent: int = 0
    logical_scattered: int = 0  # sent out of sequence
    logical_restored: int = 0  # every member received, on one queue, in sequence
    logical_unrestored: int = 0  # received out of sequence
    examples: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        out = []
        if self.whole_early:
            out.append(f"whole groups released before their final was sent={self.whole_early}")
        if self.whole_gapped:
            out.append(f"whole groups not contiguous={self.whole_gapped}")
        if self.logical_unrestored:
            out.append(f"logical groups not restored to sequence={self.logical_unrestored}")
        return out

    def rows(self) -> list[tuple[str, str, str]]:
        return [
            (
                "whole groups",
                f"{self.whole_sent}",
                f"arrived whole {self.whole_ok}; released before the final "
                f"{self.whole_early}, not contiguous {self.whole_gapped}",
            ),
            (
                "logical order",
                f"{self.logical_sent}",
                f"groups, sent out of sequence {self.logical_scattered}; restored "
                f"{self.logical_restored}, out of sequence {self.logical_unrestored}",
            ),
        ]


def judge_features(
    sent: Sequence[Sent], sides: Iterable[tuple[str, Sequence[Seen]]]
) -> FeatureReport:
    """`sides`: (name, first copies) of each side judged, the receive side last (logical
    order is judged there)."""
    report = FeatureReport()
    members: dict[str, list[Sent]] = defaultdict(list)
    for s in sent:
        if s.group is not None and (s.whole or s.logical):
            members[s.group].append(s)
    whole = {g for g, ms in members.items() if ms[0].whole}
    logical = {g: ms for g, ms in members.items() if ms[0].logical}
    report.whole_sent, report.logical_sent = len(whole), len(logical)
    final_created = {
        g: s.created_ms for g in whole for s in members[g] if s.final and s.created_ms is not None
    }
    for ms in logical.values():
        by_position = sorted(ms, key=lambda s: s.position if s.position is not None else 0)
        if [s.seq for s in by_position] != sorted(s.seq for s in ms):
            report.logical_scattered += 1
    whole_bad: set[str] = set()
    whole_seen: dict[str, int] = defaultdict(int)  # sides a whole group was judged on
    side_list = list(sides)
    for name, records in side_list:
        by_queue: dict[str, list[Seen]] = defaultdict(list)
        for r in records:
            by_queue[r.queue].append(r)
        for queue, unordered in by_queue.items():
            at: dict[str, list[int]] = defaultdict(list)
            ordered = merged(unordered)
            for i, r in enumerate(ordered):
                if r.group in whole:
                    at[r.group].append(i)
            for g, idx in at.items():
                whole_seen[g] += 1
                if idx != list(range(idx[0], idx[0] + len(idx))):
                    report.whole_gapped += 1
                    whole_bad.add(g)
                    _example(report, f"{g} ({name} side): not contiguous on {queue}")
                appended = [a for i in idx if (a := ordered[i].append_ms) is not None]
                final = final_created.get(g)
                if appended and final is not None and min(appended) < final:
                    report.whole_early += 1
                    whole_bad.add(g)
                    _example(
                        report,
                        f"{g} ({name} side): first record appended {final - min(appended)} ms "
                        "before its final was sent",
                    )
    report.whole_ok = sum(1 for g in whole if whole_seen[g] and g not in whole_bad)
    if side_list:
        _, received = side_list[-1]
        _judge_logical(report, logical, received)
    return report


def _judge_logical(
    report: FeatureReport, logical: dict[str, list[Sent]], received: Sequence[Seen]
) -> None:
    by_queue: dict[str, list[Seen]] = defaultdict(list)
    for r in received:
        if r.group in logical:
            by_queue[r.queue].append(r)
    seqs: dict[str, list[int]] = defaultdict(list)
    queues: dict[str, set[str]] = defaultdict(set)
    for queue, unordered in by_queue.items():
        for r in merged(unordered):
            assert r.group is not None
            seqs[r.group].append(r.seq)
            queues[r.group].add(queue)
    for g, ms in logical.items():
        got = seqs.get(g, [])
        if got != sorted(got):
            report.logical_unrestored += 1
            _example(report, f"{g}: received in the order {got[:12]}")
        elif len(queues[g]) == 1 and got == list(range(len(ms))):
            report.logical_restored += 1


def _example(report: FeatureReport, text: str) -> None:
    if len(report.examples) < 5:
        report.examples.append(text)
