"""Assigned partitions that a unit never reads although records wait in them (pure logic,
no I/O): a guard against a librdkafka defect that strands a partition for good.

After an assignment without explicit offsets librdkafka asks the group coordinator for the
committed offsets before it starts fetching. If that OffsetFetch fails as a whole (a
request-level error such as NOT_COORDINATOR, as right after a broker restart while the
coordinator moves or loads), librdkafka leaves the partition among those "being queried"
and never asks again: the partition stays assigned, its fetcher never starts, and its
backlog grows while the group believes it is consumed (librdkafka issue #5586, open in
2.16). A chaos run saw what that does: a send unit held a partition for four minutes after
the broker restart and read nothing of it, so three groups whose later members sat there
held all three destinations and everything else waited.

A second chaos run saw the same stall on partitions the unit had read before: after a
transaction that never returned and a rewind to the committed offsets, a receive unit read
nothing more of its four partitions for three minutes, and the records it had parked in
the aborted transaction (counted in the table) were never parked again.

The guard needs nothing from librdkafka's internals (its statistics would show the
fetcher's state, but turned on they cost the units latency). A partition is a *suspect*
when the unit read nothing of it for `after_s` (since its assignment, or since the last
message of it it read), and the unit does not keep it paused itself (priority bands, the
busy policy `hold`, a back-off). The unit then asks the broker, in one batched request
each, for the suspects' committed offsets, low watermarks and last stable offsets (what a
read_committed consumer can read): a suspect whose last stable offset lies past where it
would read next (its position, which passes a transaction's marker, or its committed
offset, whichever is later; never before its low watermark) has records waiting that the
unit has not read in `after_s`, so it is *stranded*, and the unit assigns it again
(`Source.reassign`), which reads its committed offset afresh and starts a new fetcher from
there. The caller asks only about partitions whose position is their committed offset: none
of the batch in flight, and none of the waiting room's, whose records the drain step holds
past the committed offset, unless nothing of it was read since its assignment. A suspect
with nothing waiting is idle: it is asked about again `after_s` later; one the broker did
not answer for, `retry_s` later. Records deleted (`kafka-delete-records`, retention) past a
committed offset before they were read are no records waiting: librdkafka finds nothing
from the low watermark and its position stays unknown, so without the low watermark such a
partition was assigned again every `after_s`, for ever.

The delay counts only time in which a partition fetched would have been read: a call that
blocked or a back-off (everything paused) pushes every partition's delay back (`tick`), and
so does a turn whose poll came back full. Then the local queue held more, and records
fetched of a partition wait in it behind those of the others: with a backlog and a queue
deeper than `after_s` of the unit's work, a partition can go unread for longer while its
fetcher runs, and assigning it again would throw away what it fetched and queue it last
again, so that it is never read while the backlog lasts. Only once the queue has run dry
can the guard tell a partition whose fetcher stopped from one waiting its turn; under a
backlog that never ends a stranded partition waits for the backlog to end. A partition the
unit resumes (after a hold, a back-off, a priority band's pause) starts its delay over
(`resumed`): the time it was kept paused was no time it could be read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from router.unit.steps.batch import TP

STRANDED_AFTER_S = 20.0  # assigned this long, nothing read though records wait: assigned again
RETRY_S = 10.0  # a suspect the broker did not answer for is asked about again this much later
GAP_S = 3.0  # the unit's loop away this long (blocked, backing off): it could read nothing
MAX_SUSPECTS = 64  # asked about in one turn at most (the requests are batched)


@dataclass
class StallGuard:
    """When each partition was assigned (or last found idle) and whether anything of it
    was consumed since; which are suspects (`suspects`) and which stranded (`judge`)."""

    after_s: float = STRANDED_AFTER_S
    retry_s: float = RETRY_S
    gap_s: float = GAP_S
    due: dict[TP, float] = field(default_factory=dict)  # assigned: when it is a suspect
    unconsumed: set[TP] = field(default_factory=set)  # assigned, nothing consumed since
    ticked: float | None = None  # when the unit's loop last looked (`tick`)

    def assigned(self, tps: Iterable[TP], now: float) -> None:
        for tp in tps:
            self.due[tp] = now + self.after_s
            self.unconsumed.add(tp)

    def revoked(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self.due.pop(tp, None)
            self.unconsumed.discard(tp)

    def took(self, tps: Iterable[TP], now: float) -> None:
        """Partitions of which messages were consumed at `now`."""
        due, then = self.due, now + self.after_s
        for tp in tps:
            if tp in due:
                due[tp] = then
        if self.unconsumed:
            self.unconsumed.difference_update(tps)

    def resumed(self, tps: Iterable[TP], now: float) -> None:
        """Partitions the unit kept paused and now resumes: read from now on (the time
        paused was no time unread), so due `after_s` from now at the earliest."""
        due, then = self.due, now + self.after_s
        for tp in tps:
            if tp in due and due[tp] < then:
                due[tp] = then

    def tick(self, now: float, queued: bool = False) -> None:
        """The unit's loop looks, able to read (not backing off). Time it spent away
        longer than `gap_s` (a call that blocked, a back-off with everything paused) is no
        time a partition went unread, nor is a turn whose poll came back full (`queued`:
        records may wait in the local queue, fetched, for any partition): every
        partition's delay is pushed back by it."""
        if self.ticked is not None and (queued or now - self.ticked > self.gap_s):
            away = now - self.ticked
            for tp in self.due:
                self.due[tp] += away
        self.ticked = now

    def suspects(self, now: float, skip: Collection[TP]) -> list[TP]:
        """Partitions due (nothing consumed of them for `after_s` since their assignment
        or their last message, not asked about since) but those in `skip` (kept paused,
        or whose position may not be their committed offset); `MAX_SUSPECTS` at most."""
        out = [tp for tp, at in self.due.items() if at <= now and tp not in skip]
        return sorted(out)[:MAX_SUSPECTS]

    def judge(
        self,
        suspects: Iterable[TP],
        starts: Mapping[TP, int],
        lows: Mapping[TP, int],
        stable: Mapping[TP, int],
        now: float,
    ) -> list[TP]:
        """The stranded among `suspects`: where a read would start (`starts`: the
        committed offset or the position, whichever is later; never before the low
        watermark, `lows`) lies before the last stable offset (`stable`). The others are
        asked about again later: an idle one `after_s` later, one the broker gave no
        answer for (absent from `lows` or `stable`) `retry_s` later. A stranded one is not
        asked about again until `assigned` starts it over (it is assigned again)."""
        out = []
        for tp in suspects:
            if tp not in self.due:
                continue
            low, lso = lows.get(tp), stable.get(tp)
            if low is None or lso is None or low < 0 or lso < 0:
                self.due[tp] = now + self.retry_s
            elif lso > max(starts.get(tp, low), low):
                self.due[tp] = now + self.after_s  # until assigned again
                out.append(tp)
            else:
                self.due[tp] = now + self.after_s
        return sorted(out)
