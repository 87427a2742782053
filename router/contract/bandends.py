"""Where a band partition ends for a `read_committed` reader (pure, no I/O), shared by the
units' band source (`router.unit.bandsource`) and the `Receiver`'s (`router.receiver.bandlag`).

A reader's consumer cannot read past a partition's last stable offset (LSO): the first
record of a transaction still open. librdkafka's cached watermark of a fetched partition is
the high watermark (its fetch responses carry both; `get_watermark_offsets` gives the high
one), so a partition holding a transaction that stays open (its producer killed mid-batch,
until it is fenced or `transaction.timeout.ms` aborts it) looks backlogged by everything
after that record while nothing of it can be read. Its band would take turn after turn
reading nothing, and every lower band would get only its minimum share meanwhile.

So the broker's answers about a partition (ListOffsets under `read_committed`: the LSO)
cap its end while the reader stands at or before them:

* `seen(tp, high)`: a fetched partition's cached high watermark;
* `answered(tp, stable, now, at)`: the broker's LSO of it (paused partitions, those that
  look stuck, those never fetched, as the callers ask), the reader at `at`; an answer below
  the high watermark known (or below `at`) is a cap, any other raises the end;
* `end(tp, at)`: the end to count a backlog to, from position `at`: the high watermark,
  capped by the last such LSO while the reader has not read past it;
* `stuck(tp, at, now)`: whether to ask its LSO: it looks backlogged at the same position
  for `after_s` (a partition read from moves on), and the last answer is `after_s` old.
"""

from __future__ import annotations

TP = tuple[str, int]
NEVER = float("-inf")  # a time.monotonic() long ago (it starts near 0 on a fresh machine)


class BandEnds:
    def __init__(self, after_s: float = 1.0) -> None:
        self.after_s = after_s
        self.high: dict[TP, int] = {}  # the highest high watermark seen (it never goes back)
        self.stable: dict[TP, int] = {}  # the last LSO answered, until read past
        self._still: dict[TP, tuple[int, float]] = {}  # position -> since when, looking backlogged
        self._answered: dict[TP, float] = {}  # when the last LSO of a partition came

    def forget(self, tp: TP) -> None:
        """Revoked (or assigned afresh): learnt again."""
        self.high.pop(tp, None)
        self.stable.pop(tp, None)
        self._still.pop(tp, None)
        self._answered.pop(tp, None)

    def seen(self, tp: TP, high: int) -> None:
        if high > self.high.get(tp, -1):
            self.high[tp] = high

    def answered(self, tp: TP, stable: int, now: float, at: int = -1) -> None:
        """The broker's last stable offset of `tp` (the reader at position `at`). Below the
        high watermark known, a transaction holds it: the end is capped there until the
        reader reads past it. Below the position (a committed offset past it, a leader
        behind), nothing past the position can be read: capped at the position. Else
        nothing is held: no cap, and a paused partition's end moves up to it."""
        self._answered[tp] = now
        if stable < self.high.get(tp, -1) or stable < at:
            self.stable[tp] = max(stable, at)
        else:
            self.stable.pop(tp, None)
            self.seen(tp, stable)

    def end(self, tp: TP, at: int) -> int:
        """Where `tp` ends for a reader at position `at` (-1 if unknown)."""
        high = self.high.get(tp, -1)
        stable = self.stable.get(tp)
        if stable is None:
            return high
        if at > stable:  # read past it: the transaction that held it ended
            del self.stable[tp]
            return high
        return min(high, stable)

    def stuck(self, tp: TP, at: int, now: float) -> bool:
        """Whether a partition read from should have its LSO asked: its high watermark has
        been past the position `at`, which has not moved, for `after_s`, and its last
        answer (if any) is as old. Asked again every `after_s` while so: the transaction
        that holds it may end at any time."""
        if at < 0 or self.high.get(tp, -1) <= at:
            self._still.pop(tp, None)
            return False
        still = self._still.get(tp)
        if still is None or still[0] != at:
            self._still[tp] = (at, now)
            return False
        return (
            now - still[1] >= self.after_s and now - self._answered.get(tp, NEVER) >= self.after_s
        )
