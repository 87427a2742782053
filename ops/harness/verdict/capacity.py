"""The capacity rule: which interleavings a run may show (pure logic, no I/O).

Judged for one side at a time from what its destinations hold (send side: the partitions
of the transfer topic; receive side: the receive queues), each record with the broker's
append time (LogAppendTime), never from the router's counters:

* a record r on destination D is *interleaved* if another group G has an open span on D
  around r: G's first record on D is before r, and G's final record on D after r or never
  arrived on D;
* a destination is *occupied* during each of its groups' occupancy: [from_ms of the
  group's first record there, append time of its final there + `RELEASE_SLACK_MS`], or
  open-ended if its final never arrived there. A member that never reached the
  destination (expired or dead-lettered on the way) was routed all the same, so the
  occupancy starts at the earliest from_ms of any of the group's members on the side;
* the router places a record (an ordinary message, or a group's first message on D) at
  one instant of its *decision window* [from_ms, append_ms]: from_ms is the earliest
  instant it could have been decided (receive side: the append time of its first copy on
  the transfer topic, which the receive unit reads only once committed; send side: the
  sender's create time), append_ms the instant it reached D;
* such a placement, if interleaved, is *allowed* only if at some instant of its decision
  window every other destination of the side (including any that never received
  anything) was occupied. Anything else is *disallowed*, whatever the busy policy;
* a later message of a group is not a placement: it follows its group. Interleaved, it
  is allowed only if every overlap it sits in was allowed, and an overlap of two groups'
  spans was made by the first record of whichever of the two started later on D;
* a multicast copy (`Placed.copy`, receive side) is placed on the queue it names, and
  while it is in flight (its decision window, + the release slack) the table keeps
  other batches' new groups off that queue (a lease): for a group's first record and
  for a copy, a destination with a copy in flight counts as occupied too (not for an
  ordinary message, which the table places on such a destination). A copy whose window
  meets its queue's occupancy (a group in charge, or an earlier such copy) may have
  waited in the room: once admitted, its queue is in charge of the copies (load 1 in the
  table, `router/table/store/lua/prelude.lua` `admit`) until the drain's release, so its window +
  the release slack counts as occupancy for every placement.

Instants are whole milliseconds and intervals are closed: a timestamp of X ms stands for
some instant in [X, X+1), so intervals that share a millisecond count as overlapping.

With priority bands, a destination is all its band topics (`Placed.band`): the router
appends nothing to any band of a destination while a group is open on it. Its records
are judged in the order they were appended (`ops.harness.verdict.bands.merged`): each band
topic's in offset order, the band topics merged by append time. Records of different
band topics appended in the same millisecond have no order in the data: the tie is
resolved leniently, a group's final (and its later members) before, and a group's first
record after, the other records of that millisecond; so a record of another band counts
as inside a group's span only if no order of the tie puts it outside.

Why the windows and occupancies are sound (the rule never fails a router that shared only
when its table had every other destination busy): the table counts a destination busy
from the decision of a group's first message, which is not before that record's from_ms,
until the group's release, which comes after the commit of the transaction that carried
its final, so after the final's append time; and each decision lies in its record's
window. The one gap is the release: it follows the final's append by the rest of that
transaction plus one Redis call. Where a run sampled when each record became visible to
read_committed readers (`Placed.visible_ms`, `ops.harness.verdict.visibility`), the rest
of the transaction is in the data: the commit returned before the final was seen visible,
so the release lags that instant by the Redis call alone, and the slack is counted from
it, as far as `VISIBLE_BOUND_MS` past the append (another producer's open transaction
holds the LSO back too). Without the samples the slack is counted from the append time.
`RELEASE_SLACK_MS` covers the lag as measured (see its comment); a release that came
later still (a unit killed between its commit and its settle leaves the release to the
sweeper, seconds later) can make the rule disallow a share the table did make with every
destination busy. A driver that causes such delays itself says when (`Disturbance`: a
unit killed, a server restarted), and an occupancy whose final's release could have been
held up by one lasts until that disturbance ended plus its recovery bound. Any other late
release shows in the verdict, which names the free destination and when it was freed, for
a reader to check.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ops.harness.verdict.bands import lane_name, merged
from ops.harness.verdict.intervals import (
    FOREVER,
    Intervals,
    gaps,
    intersect,
    meets,
    merge,
)

# How long after a final's append time its destination may still count as busy in the
# table: the rest of the transaction that carried it (its commit) and the settle call
# that releases the group. Measured with
# `python -m ops.harness.scenarios.release_lag --runs 3` (both tables' entries polled every 2 ms
# during the demo's run; lag = the first poll without a group's entry - its final's append
# time, an upper bound): on this 2-core machine, 2,345 releases, p50 7 ms, p99 59-66 ms,
# max 161 ms; runs on a busier machine (twice the units) reached 549 ms. 200 ms covers every
# release measured at the demo's load, and no more: a larger value would also excuse
# placements made while a destination was really free. A release later than this (a
# loaded machine, a broker restart stalling commits, a unit killed between commit and
# settle leaving the release to the sweeper) shows in an example as a destination "free
# since -N" ms with N a little above it.
RELEASE_SLACK_MS = 200

# The slack for runs where unit processes join and leave while traffic flows: for a while
# the 2-core machine runs twice the units, and each rebalance completes every unit's batch
# in flight at once, so commits and settles queue behind one another. The busier runs above
# reached 549 ms; a CI run of tests/integration/unit/test_multiprocess.py's join-and-leave case
# showed a destination "free since -10" ms through a 99 ms window (a release ~310 ms after
# its final). The chaos runs (ops.harness.scenarios.chaos_run: replacements join after
# every kill) are judged with it too: with the release on the unit's commit thread
# (router.unit.steps.pipeline `release`), short chaos runs measured release lags of p99
# 243 ms, max 303-486 ms (table polled every 5 ms). 600 ms covers these; a placement on a
# destination free for longer than that is still disallowed.
LOADED_RELEASE_SLACK_MS = 600

# How far past a final's append the slack may start from its sampled visibility
# (`Placed.visible_ms`). The LSO is held back by the oldest open transaction of ANY
# producer on the partition: a unit killed with a transaction open (ended by the broker
# only after `transaction.timeout.ms` plus its abort check) keeps every other unit's
# finals there from being seen visible for seconds, although their commits and releases
# came at once. Unbounded, that would excuse placements on destinations that were free.
# 2 s covers the slow commits seen (a CI run's catch-up after the broker restart: finals
# released 645-664 ms after their append, beyond the loaded slack); a release later than
# that is still disallowed unless a disturbance explains it.
VISIBLE_BOUND_MS = 2_000


@dataclass(frozen=True, slots=True)
class Disturbance:
    """A stretch of wall-clock time [start_ms, end_ms] (epoch ms, as append times are)
    that can hold up a release: a unit killed (one killed between its commit and its
    release leaves it to the sweeper, `sweeper.closing_grace_ms` later) or a server
    restarted (commits and releases wait for it, then for the units' back-off). A group
    whose final was appended at f, with [f, f + slack] meeting [start_ms, end_ms], may be
    released as late as end_ms + recover_ms. `side`: the side it affects (None: both)."""

    start_ms: int
    end_ms: int
    recover_ms: int
    side: str | None = None
    what: str = ""


EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class Placed:
    """A record's first copy on one destination, with its decision window."""

    dest: str
    offset: int
    event_id: str
    group: str | None
    final: bool
    from_ms: int
    append_ms: int
    copy: bool = False  # a multicast copy (router/table/multicast.py)
    band: int = 0  # the band topic of `dest` it is on (router.priority: 0 = dest itself)
    # when it became visible to read_committed readers, as sampled (None: not sampled)
    visible_ms: int | None = None

    @property
    def committed_ms(self) -> int:
        """The latest instant its transaction can have committed by, as far as the data
        shows: when it was seen visible, else (not sampled) its append time."""
        return self.append_ms if self.visible_ms is None else max(self.append_ms, self.visible_ms)


@dataclass
class SideReport:
    side: str
    destinations: int = 0
    records: int = 0  # first copies judged
    release_slack_ms: int = RELEASE_SLACK_MS
    interleaved: int = 0  # records inside another group's open span
    allowed: int = 0
    disallowed: int = 0
    placements: int = 0  # interleaved records the router placed (ordinary, group's first)
    placements_disallowed: int = 0
    held_up: int = 0  # occupancies extended by a disturbance
    examples: list[str] = field(default_factory=list)  # disallowed placements, explained
    inside: list[str] = field(default_factory=list)  # the first interleavings, where

    def line(self) -> str:
        return (
            f"{self.side} side: {self.interleaved} interleaved, {self.allowed} allowed, "
            f"{self.disallowed} disallowed ({self.placements_disallowed} of {self.placements} "
            f"placements); {self.destinations} destinations, release slack "
            f"{self.release_slack_ms} ms"
            + (f", {self.held_up} releases held up by disturbances" if self.held_up else "")
        )


def judge_side(
    side: str,
    records: Iterable[Placed],
    destinations: Sequence[str],
    release_slack_ms: int = RELEASE_SLACK_MS,
    disturbances: Sequence[Disturbance] = (),
    opened_from: Mapping[str, int] | None = None,
) -> SideReport:
    """Count the interleavings on one side's destinations and judge each by the capacity
    rule. `records`: first copies only; `destinations`: all of the side's; `disturbances`:
    what may have held up releases (those of other sides are ignored); `opened_from`: a
    group -> the earliest instant any of its members could have been decided on this side
    (a member that never reached a destination, expired or dead-lettered, was routed all
    the same: its group's occupancy starts there, not at its first record on a queue)."""
    by_dest: dict[str, list[Placed]] = defaultdict(list)
    for r in records:
        by_dest[r.dest].append(r)
    every = sorted(set(destinations) | set(by_dest))
    report = SideReport(side, len(every), sum(map(len, by_dest.values())), release_slack_ms)
    mine = sorted((x for x in disturbances if x.side in (None, side)), key=lambda x: x.start_ms)
    occupied, busy = {}, {}
    for d in every:
        by_dest[d] = merged(by_dest[d])  # in append order over its band topics
        occupied[d], held = occupancy(by_dest[d], release_slack_ms, mine, opened_from)
        occupied[d] = waited(by_dest[d], occupied[d], release_slack_ms, mine)
        busy[d] = merge([*occupied[d], *fenced(by_dest[d], release_slack_ms, mine)])
        report.held_up += held
    for dest in every:
        others = {d: occupied[d] for d in every if d != dest}
        cover: Intervals = [(-FOREVER, FOREVER)]
        for occ in others.values():
            cover = intersect(cover, occ)
        cover_new = cover  # for a group's first record and a copy: copies fence too
        if any(r.copy for recs in by_dest.values() for r in recs):
            cover_new = [(-FOREVER, FOREVER)]
            for d in others:
                cover_new = intersect(cover_new, busy[d])
        _judge_destination(report, dest, by_dest[dest], cover, others, cover_new)
    report.allowed = report.interleaved - report.disallowed
    return report


def occupancy(
    records: Sequence[Placed],
    release_slack_ms: int,
    disturbances: Sequence[Disturbance] = (),
    opened_from: Mapping[str, int] | None = None,
) -> tuple[Intervals, int]:
    """When one destination was in charge of a group (`records` in append order), and how
    many of its groups' releases a disturbance (sorted by start) may have held up. A group
    is in charge from its first record's `from_ms`, or from `opened_from[group]` if that is
    earlier (a member routed without reaching the destination)."""
    first: dict[str, Placed] = {}
    end: dict[str, int] = {}
    held = 0
    for r in records:
        if r.group is None:
            continue
        first.setdefault(r.group, r)
        if r.final and r.group not in end:
            end[r.group], late = release_by(
                r.append_ms, release_slack_ms, disturbances, r.committed_ms
            )
            held += late
    since = opened_from or {}
    return (
        merge(
            (min(f.from_ms, since.get(g, f.from_ms)), end.get(g, FOREVER)) for g, f in first.items()
        ),
        held,
    )


def waited(
    records: Sequence[Placed],
    occupied: Intervals,
    release_slack_ms: int,
    disturbances: Sequence[Disturbance] = (),
) -> Intervals:
    """`occupied` (one destination's groups) with the copies that may have waited for it
    (`records` in append order): a copy goes straight only to a queue in charge of no
    group with no earlier copy waiting, so one whose window meets the occupancy so far
    may have been parked, then admitted (the queue in charge of it until its release)."""
    out = occupied
    for r in records:
        if r.copy and meets(out, r.from_ms, r.append_ms):
            end = release_by(r.append_ms, release_slack_ms, disturbances)[0]
            out = merge([*out, (r.from_ms, end)])
    return out


def fenced(
    records: Sequence[Placed], release_slack_ms: int, disturbances: Sequence[Disturbance] = ()
) -> Intervals:
    """When one destination had a multicast copy in flight (decision window to append +
    the release slack): the table's lease then keeps other batches' new groups off it."""
    return merge(
        (r.from_ms, release_by(r.append_ms, release_slack_ms, disturbances)[0])
        for r in records
        if r.copy
    )


def release_by(
    final_ms: int,
    release_slack_ms: int,
    disturbances: Sequence[Disturbance],
    committed_ms: int | None = None,
) -> tuple[int, bool]:
    """The latest a group whose final was appended at `final_ms` (and seen committed by
    `committed_ms`, if sampled) may be released, and whether a disturbance (sorted by
    start) pushed it past the slack. The slack counts from the commit, as far as
    `VISIBLE_BOUND_MS` past the append; a disturbance is judged against the append time,
    so a sampled commit never shortens what one held up. A disturbance that begins while
    the release is still due pushes it on, so chains of them add up."""
    committed = final_ms if committed_ms is None else committed_ms
    due = max(final_ms, min(committed, final_ms + VISIBLE_BOUND_MS)) + release_slack_ms
    late = False
    for x in disturbances:
        if x.start_ms > due:
            break
        if x.end_ms >= final_ms and x.end_ms + x.recover_ms > due:
            due, late = x.end_ms + x.recover_ms, True
    return due, late


def _at(dest: str, r: Placed) -> str:
    """Where a record is: its band topic, offset and append time (UTC), to set beside the
    units' logs (a destination's band topics are merged by append time, so an offset alone
    may name another topic than the one beside it)."""
    at = datetime.fromtimestamp(r.append_ms / 1000, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
    return f"{lane_name(dest, r.band)}@{r.offset} ({at})"


def _judge_destination(
    report: SideReport,
    dest: str,
    records: Sequence[Placed],
    cover: Intervals,
    others: dict[str, Intervals],
    cover_new: Intervals | None = None,
) -> None:
    # open group -> (its first record's position in `records`, that placement allowed)
    opened: dict[str, tuple[int, bool]] = {}
    seen: set[str] = set()
    for at, r in enumerate(records):
        g = r.group
        around = [x for x in opened if x != g]
        ok = True
        if around:
            report.interleaved += 1
            if len(report.inside) < EXAMPLES:
                what = "ordinary" if g is None else f"group {g}{' final' if r.final else ''}"
                report.inside.append(
                    f"{_at(dest, r)} {r.event_id} ({what}) inside "
                    + ", ".join(
                        f"{x} (from {_at(dest, records[opened[x][0]])})" for x in around[:3]
                    )
                    + (f" (+{len(around) - 3} more)" if len(around) > 3 else "")
                )
            if g is not None and g in opened:  # a later message of g: follows its group
                mine, mine_ok = opened[g]
                ok = all(mine_ok if opened[x][0] < mine else opened[x][1] for x in around)
            else:  # placed here by the router
                lo, hi = min(r.from_ms, r.append_ms), max(r.from_ms, r.append_ms)
                new = cover_new is not None and (r.copy or g is not None)
                ok = meets(cover_new if new and cover_new is not None else cover, lo, hi)
                report.placements += 1
                if not ok:
                    report.placements_disallowed += 1
                    if len(report.examples) < EXAMPLES:
                        report.examples.append(_example(dest, r, around, lo, hi, others))
            report.disallowed += not ok
        if g is None:
            continue
        if g not in seen:
            seen.add(g)
            if not r.final:
                opened[g] = (at, ok)
        elif r.final:
            opened.pop(g, None)


def _example(
    dest: str, r: Placed, around: list[str], lo: int, hi: int, others: dict[str, Intervals]
) -> str:
    """A disallowed placement: the destinations free during its window, when (ms into the
    window), and for one free at its start, since when (its last occupancy's end)."""
    what = f"ordinary {r.event_id}" if r.group is None else f"first of group {r.group}"
    spans = around[0] + (f" (+{len(around) - 1} more)" if len(around) > 1 else "")
    free = []
    for d, occ in sorted(others.items()):
        holes = gaps(occ, lo, hi)
        if not holes:
            continue
        text = d + " " + ",".join(f"+{s - lo}..+{e - lo}" for s, e in holes[:3])
        if holes[0][0] == lo:
            before = [e for _, e in occ if e < lo]
            text += f" (free since -{lo - before[-1]})" if before else " (never occupied)"
        free.append(text)
    shown = "; ".join(free[:4]) + (f"; +{len(free) - 4} more" if len(free) > 4 else "")
    clock = datetime.fromtimestamp(lo / 1000).strftime("%H:%M:%S.%f")[:-3]
    return (
        f"{lane_name(dest, r.band)}@{r.offset} {what} entered group {spans}'s span; "
        f"window {clock} "
        f"+{hi - lo} ms; free (ms into the window): {shown}"
    )
