"""Priority bands in the verdict (pure logic, no I/O): one destination over its band
topics, and every message in the band its priority asks for.

With `priority.bands` = N > 1, every destination (a transfer partition, a receive queue)
is N band topics (`router.contract.priority`). The router keeps a group on one band topic of one
destination and appends nothing to any band topic of a destination while a group is open
on it; what its verdict must show:

* order and completeness per band topic: a group whole and in order on ONE band topic of
  ONE queue (a group on two band topics of a queue is split; `verify` counts it so);
* interleaving per destination, its band topics merged (`merged`): the broker's append
  times (LogAppendTime on every band topic) order the records of different band topics,
  each band topic's own records staying in offset order. Records of different band
  topics appended in the same millisecond cannot be ordered by the data; they are taken
  leniently (`_tier`): a group's final and later members before, and a group's first
  record after, the other records of that millisecond (so a record counts as
  interleaved only if no order of the tie makes it outside every other group's span);
* the band: each message on the band topic its priority maps to (`band_of`); a group
  member on the band of its group's FIRST member (the router ignores later members'
  headers), a multicast copy on its message's band. Judged from what the topics hold
  against the priorities the senders recorded (`Sent.priority`): `judge_bands`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from ops.harness.verdict.records import Seen, Sent
from router.contract.priority import band_of, band_topic

EXAMPLES = 5


class OnBand(Protocol):
    """A record on one band topic of a destination (`Seen`, `capacity.Placed`)."""

    @property
    def band(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def append_ms(self) -> int | None: ...
    @property
    def group(self) -> str | None: ...
    @property
    def final(self) -> bool: ...


R = TypeVar("R", bound=OnBand)


def merged(records: Iterable[R]) -> list[R]:
    """One destination's records in the order they were appended to it: each band topic's
    records in offset order, the band topics merged by append time (see the module's
    docstring for ties). One band topic alone: offset order, append times not needed."""
    lanes: dict[int, list[R]] = defaultdict(list)
    for r in records:
        lanes[r.band].append(r)
    for lane in lanes.values():
        lane.sort(key=lambda r: r.offset)
    if len(lanes) <= 1:
        return next(iter(lanes.values()), [])
    for lane in lanes.values():
        for r in lane:
            if r.append_ms is None:
                raise ValueError(f"band {r.band}@{r.offset}: no append time to merge bands by")
    at = dict.fromkeys(lanes, 0)
    seen: set[str] = set()
    out: list[R] = []
    while True:
        heads = [(lane[at[b]], b) for b, lane in lanes.items() if at[b] < len(lane)]
        if not heads:
            return out
        ms = min(_ms(r) for r, _ in heads)
        r, b = min(
            ((r, b) for r, b in heads if _ms(r) == ms), key=lambda x: (_tier(x[0], seen), x[1])
        )
        at[b] += 1
        out.append(r)
        if r.group is not None:
            seen.add(r.group)


def _ms(r: OnBand) -> int:
    assert r.append_ms is not None  # checked by `merged`
    return r.append_ms


def _tier(r: OnBand, seen: set[str]) -> int:
    """Which record of a millisecond's tie goes first (lowest): a group's final, then its
    later members (they lead to its final), ordinary records and one-record groups, and
    last a group's first record (it opens a span)."""
    if r.group is None:
        return 2
    if r.group in seen:
        return 0 if r.final else 1
    return 2 if r.final else 3


def lane_name(dest: str, band: int) -> str:
    """A band topic of a destination, for examples: `q.recv.1.p2`; `transfer[3]` band 2:
    `transfer[3].p2`."""
    return band_topic(dest, band) if band else dest


# --------------------------------------------------------------------------- the band


@dataclass
class BandReport:
    """Where the messages with a priority landed, and every record on the wrong band."""

    bands: int = 1
    prioritised: int = 0  # messages sent with a `message-priority` header
    prioritised_groups: int = 0  # groups whose first member had one
    landed: Counter[int] = field(default_factory=Counter)  # receive side: band -> records
    wrong: Counter[str] = field(default_factory=Counter)  # side -> records on a wrong band
    wrong_groups: int = 0  # groups with a record on a wrong band (either side)
    split: int = 0  # groups on more than one band topic of the receive side
    examples: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        out = [f"{side} side: wrong band={n}" for side, n in sorted(self.wrong.items()) if n]
        if self.split:
            out.append(f"split over bands={self.split}")
        return out

    def rows(self) -> list[tuple[str, str, str]]:
        """The summary's (label, value, note) rows: nothing without bands or priorities."""
        if self.bands <= 1 and not self.prioritised:
            return []
        landed = ", ".join(f"band {b} {self.landed[b]}" for b in range(self.bands))
        wrong = sum(self.wrong.values())
        return [
            (
                "with a priority",
                f"{self.prioritised}",
                f"messages ({self.prioritised_groups} groups by their first member); on "
                f"the receive queues (a multicast copy each): {landed}",
            ),
            (
                "wrong band",
                f"{wrong}",
                f"send side {self.wrong['send']}, receive side {self.wrong['receive']} "
                f"({self.wrong_groups} groups); groups split over bands {self.split}",
            ),
        ]


def expected_bands(
    sent: Iterable[Sent], bands: int
) -> tuple[dict[str, int], dict[str, int | None]]:
    """(event ID -> the band its record must be on, group -> its first member's priority):
    an ordinary message's priority's band; a group member's, its group's first member's (a
    group whose first member was never acknowledged has no expectation)."""
    sent = list(sent)
    firsts = {s.group: s.priority for s in sent if s.group is not None and s.seq == 0}
    out: dict[str, int] = {}
    for s in sent:
        if s.group is None:
            out[s.event_id] = band_of(s.priority, bands)
        elif s.group in firsts:
            out[s.event_id] = band_of(firsts[s.group], bands)
    return out, firsts


def judge_bands(
    sent: Sequence[Sent],
    of: Mapping[str, Sent],
    received: Iterable[Seen],
    forwarded: Iterable[Seen] | None,
    bands: int,
) -> BandReport:
    """Every first copy (`received`: the receive queues', multicast copies named by
    `records.copy_id`; `forwarded`: the transfer topic's) on the band its message's
    priority maps to. `of`: every record's event ID (a copy's too) -> what was sent."""
    report = BandReport(bands)
    want, firsts = expected_bands(sent, bands)
    report.prioritised = sum(1 for s in sent if s.priority is not None)
    report.prioritised_groups = sum(1 for p in firsts.values() if p is not None)
    wrong_groups: set[str] = set()
    bands_of: dict[tuple[str, str], set[int]] = defaultdict(set)  # (group, queue) -> bands
    sides = [("receive", received)] + ([("send", forwarded)] if forwarded is not None else [])
    for side, records in sides:
        for r in records:
            s = of.get(r.event_id)
            if s is None:
                continue  # never sent: `verify` reports it as unexpected
            expect = want.get(s.event_id)
            if side == "receive":
                if r.group is not None:
                    bands_of[(r.group, r.queue)].add(r.band)
                if (s.priority if s.group is None else firsts.get(s.group)) is not None:
                    report.landed[r.band] += 1
            if expect is None or r.band == expect:
                continue
            report.wrong[side] += 1
            if r.group is not None:
                wrong_groups.add(r.group)
            if len(report.examples) < EXAMPLES:
                why = (
                    f"its group's first member's priority {_said(firsts.get(r.group))}"
                    if r.group is not None
                    else f"priority {_said(s.priority)}"
                )
                report.examples.append(
                    f"{r.event_id} on {lane_name(r.queue, r.band)}@{r.offset} ({side} side): "
                    f"band {r.band}, {why} asks for band {expect}"
                )
    report.wrong_groups = len(wrong_groups)
    report.split = len({g for (g, _), b in bands_of.items() if len(b) > 1})
    return report


def _said(priority: int | None) -> str:
    return "none" if priority is None else str(priority)
