"""Which priority bands a unit consumes next (pure, no I/O): highest band first, with a
minimum share for every lower band, so that starvation is bounded.

Every batch the unit asks for a `Turn`, given each band's backlog (messages not yet
consumed on its assigned partitions):

* no band has a backlog: every band is consumed (nothing to overtake);
* otherwise the highest band with a backlog, `top`, and every band above it, are consumed
  and the bands below `top` are paused; each paused band with a backlog earns
  `min_share` credit per batch it is passed over;
* a band whose credit reached 1 gets the next turn alone (a *share turn*: only its
  partitions are consumed for that batch) and pays 1; the bands it passed over earn
  credit as well (several due at once: the one with the most credit first).

So a band with a backlog is consumed in at least one batch out of every
`starvation_bound` (`ceil(1 / min_share) + bands - 2`), whatever the higher bands carry,
and the higher bands keep at least `1 - min_share * (bands - 1)` of the batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from router.config.settings import check_bands


@dataclass(frozen=True, slots=True)
class Turn:
    bands: frozenset[int]  # the bands consumed in this batch; the others are paused
    share: bool = False  # a minimum-share turn of one lower band


def starvation_bound(bands: int, min_share: float) -> int:
    """A band that keeps a backlog is consumed in at least one of any this many
    consecutive batches (tests/unit/contract/test_priority.py checks it as a property)."""
    check_bands(bands, min_share)
    if bands == 1:
        return 1
    return math.ceil(round(1 / min_share, 9)) + bands - 2


class BandScheduler:
    def __init__(self, bands: int, min_share: float) -> None:
        check_bands(bands, min_share)
        self.bands = bands
        self.min_share = min_share
        self.credit = [0.0] * bands
        self.all = frozenset(range(bands))

    def next(self, backlog: Sequence[int]) -> Turn:
        """The bands to consume in the next batch, given each band's backlog."""
        if len(backlog) != self.bands:
            raise ValueError(f"expected {self.bands} backlogs, got {len(backlog)}")
        top = next((b for b in range(self.bands - 1, -1, -1) if backlog[b] > 0), None)
        credit = self.credit
        if top is None:
            for b in range(self.bands):
                credit[b] = 0.0
            return Turn(self.all)
        for b in range(top):  # passed over: a band with a backlog earns its share
            credit[b] = credit[b] + self.min_share if backlog[b] > 0 else 0.0
        due = [b for b in range(top) if backlog[b] > 0 and credit[b] >= 1.0 - 1e-9]
        if not due:
            for b in range(top, self.bands):
                credit[b] = 0.0
            return Turn(frozenset(range(top, self.bands)))
        band = max(due, key=lambda b: (credit[b], b))
        credit[band] -= 1.0
        for b in range(top, self.bands):  # passed over by the share turn: they earn too
            credit[b] = credit[b] + self.min_share if backlog[b] > 0 else 0.0
        return Turn(frozenset({band}), share=True)
