"""How many messages a unit's next batch may take (pure): `unit.batch_size` at a light
load; under a backlog (a batch that came back full) twice as many each time, up to
`unit.max_batch_size`, so that a transaction's fixed cost (adding the offsets, the commit
and its markers) and each route call's are spread over more messages; back down by halves
once batches come back a quarter full or less. The bytes bound (`unit.max_batch_bytes`)
holds whatever the count.

With several cells (docs/explanation/cells.md) a batch is split by cell, one route call
per cell on that cell's table (on its own Redis node on a cluster), so the growth bound is
`unit.max_batch_size` per cell the unit holds partitions of (`spread`): each cell's call
then carries about what a one-cell unit's does, and each node pays its call's fixed cost
(Redis's cold start after an idle, the call's own keys) over as many messages."""

from __future__ import annotations


class BatchSizer:
    def __init__(self, base: int, most: int) -> None:
        self.base = base
        self.most_one = max(base, most)  # the bound for one cell
        self.most = self.most_one
        self.target = base

    def spread(self, cells: int) -> None:
        """The unit holds partitions of `cells` cells (at least one)."""
        self.most = max(self.base, self.most_one * max(1, cells))
        self.target = min(self.target, self.most)

    def after(self, taken: int) -> None:
        """A batch of `taken` messages was polled against the current target."""
        if taken >= self.target:
            self.target = min(self.target * 2, self.most)
        elif taken <= self.target // 4:
            self.target = max(self.base, self.target // 2)
