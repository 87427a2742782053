"""The receiver library's expiry (`router.receiver.expiry_rules` has the rules): the I/O.

`Redeliveries.admit` asks `ReceiverExpiry.expired(tp, m)` for every message it would
hand out. One found expired is accounted for in this order, then marked done by the
caller (its offset stored for the next commit):

1. its ExpiredMessage event (hop `RECEIVER`, the original key and headers, the receive-
   queue position, the instant, its group's outcome), and under `expire-group` its
   group's GroupStopped event, are produced and **flushed** (idempotent producer,
   `acks=all`): Kafka acknowledged them before the offset can move past the message;
2. its group's status moves past it (`StatusStore.expired`, with `state`) once every
   message before it on its partition is done: at once, or when the application marks
   the last of those done (`before_done`, before that one's offset is stored), so a status
   never says a member before it was processed when it was not;
3. it is recorded as accounted for (`dead:<offset>`, and a stopped group's
   `stop:<guarantee-id>`, in the partition's delivery hash: `router.receiver.deliverycounts`),
   so a receiver that reads it again after a restart skips it.

The receiver is no Kafka transaction, so the event is **at least once, never lost**: a
receiver that dies after the flush and before step 3 (or, without `state`, before the
commit) reads the message again and writes a second event for it (same source position;
a reader keeps one per position). A failure in step 1 or 3 is raised: `admit` pauses the
partition and reads the message again later, never handing it out meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from router.receiver.deliverycounts import Counts
from router.receiver.expiry_rules import ExpiryOptions, judge, stop_reason
from router.receiver.letters import ReceiverLetters
from router.receiver.received import Gatherer, OffsetTracker, Received
from router.receiver.redelivery_rules import TP, Ledger
from router.state.store import StatusStore


class ReceiverExpiry:
    """A receiver's lifetime checks, sharing its redeliveries' letters, counts and ledger
    (`options` None: none are made)."""

    def __init__(
        self,
        options: ExpiryOptions | None,
        letters: ReceiverLetters,
        counts: Counts,
        ledger: Ledger,
        status: StatusStore | None,
    ) -> None:
        self.options = options
        self.letters, self.counts, self.ledger, self.status = letters, counts, ledger, status
        self.gather: Gatherer | None = None
        self.offsets = OffsetTracker()  # the receiver's, bound by `Redeliveries.bind`
        self._pending: dict[TP, list[tuple[Received, bool]]] = {}  # statuses not written
        self.clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
        self.count = 0  # messages this receiver found expired (its own view; not a proof)

    def expired(self, tp: TP, m: Received) -> bool:
        """Whether `m` expired; if so, its events are flushed and it is recorded (the
        caller marks it done and does not hand it out)."""
        if self.options is None:
            return False
        found = judge(m, self.clock_ms(), self.options)
        if found is None:
            return False
        letters = self.letters
        letters.expired(m, found.reason, found.lifetime.expires_ms, found.on_expiry)
        stop: tuple[str, int, int] | None = None
        if found.stops_group and m.guarantee_id is not None:
            letters.group_stopped(m, stop_reason(m, found))
            stop = (m.guarantee_id, m.offset, m.offset)
        letters.flush()
        if self.status is not None and m.guarantee_id is not None:
            if self.offsets.open_below(tp, m.offset):
                self._pending.setdefault(tp, []).append((m, found.stops_group))
            else:
                self.status.expired(m, stopped=found.stops_group)
        self.counts.settle(tp, offsets(m), stop=stop)
        self.ledger.dead_lettered(tp, offsets(m))
        if stop is not None:
            self.ledger.stop(tp, *stop)
        if self.gather is not None:
            self.gather.expired(m, found.ends_group)
        self.count += 1
        return True

    def before_done(self, members: tuple[Received, ...]) -> None:
        """`members` are being marked done (their statuses written, their offsets not yet
        stored): the statuses of expired members waiting for them are written now."""
        if not self._pending or self.status is None:
            return
        for tp in {(m.topic, m.partition) for m in members}:
            waiting = self._pending.get(tp)
            if not waiting:
                continue
            done = {o for m in members if (m.topic, m.partition) == tp for o in offsets(m)}
            kept = []
            for m, stopped in waiting:
                if set(self.offsets.open_below(tp, m.offset)) <= done:
                    self.status.expired(m, stopped=stopped)
                else:
                    kept.append((m, stopped))
            self._pending[tp] = kept

    def forget(self, tp: TP) -> None:
        """The partition was taken away: statuses still waiting are not written (the
        events were; the next owner skips those members)."""
        self._pending.pop(tp, None)


def offsets(m: Received) -> tuple[int, ...]:
    """The records a message was read from (a reassembled one: every segment's)."""
    return m.parts or (m.offset,)
