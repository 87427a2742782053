"""When each record became visible to read_committed readers (pure logic, no I/O).

A run's sampler (`ops.harness.traffic.visibility.LsoSampler`) asks the broker, every few
tens of milliseconds, for the last stable offset (LSO) of every lane (a destination's
partition on one band topic) with a read_committed consumer; the LSO passes a record
only once the transaction that carried it has committed and its markers are written.
`Visibility.at(lane, offset)` is the wall-clock instant (epoch ms) of the first answer
whose LSO had passed the record: an upper bound of when it became visible, late by at
most one sampling interval plus one round trip.

Why the capacity rule may count a group's release from it: the coordinator answers the
unit's EndTxn once the commit is decided and writes the markers after that, so the
unit's `commit_transaction` returns before (or about when) the LSO passes its records,
and the release (one Redis call on the unit's commit thread) follows that return. A
final's release therefore lags its visibility by the settle call alone, while it lags its
append time by the rest of its transaction too (seconds, on a loaded machine catching
up). Measured on this stack (`tests/integration/ops/test_lso_sampler.py`): the LSO moved
5-75 ms after `commit_transaction` returned.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Visibility:
    """lane -> its LSO's changes as sampled: (LSO, epoch ms of the answer), both rising."""

    changes: Mapping[str, Sequence[tuple[int, int]]] = field(default_factory=dict)

    def at(self, lane: str, offset: int) -> int | None:
        """The first sampled instant at which `offset` on `lane` was below the LSO (None:
        never seen so, e.g. the sampler had stopped, or the lane was never sampled)."""
        seen = self.changes.get(lane)
        if not seen:
            return None
        i = bisect_right(seen, offset, key=lambda change: change[0])
        return seen[i][1] if i < len(seen) else None


def record_change(changes: list[tuple[int, int]], lso: int, at_ms: int) -> None:
    """Append a sample to one lane's changes if its LSO rose (an LSO that went back, a
    leader's answer before it caught up after a restart, is not a change)."""
    if lso < 0:
        return
    if not changes or lso > changes[-1][0]:
        changes.append((lso, max(at_ms, changes[-1][1]) if changes else at_ms))
