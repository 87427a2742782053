"""How many messages a unit's next batch may take (pure): `unit.batch_size` at a light
load; under a backlog (a batch that came back full) twice as many each time, up to
`unit.max_batch_size`, so that a transaction's fixed cost (adding the offsets, the commit
and its markers) is spread over more messages; back down by halves once batches come
back a quarter full or less. The bytes bound (`unit.max_batch_bytes`) holds whatever
the count."""

from __future__ import annotations


class BatchSizer:
    def __init__(self, base: int, most: int) -> None:
        self.base = base
        self.most = max(base, most)
        self.target = base

    def after(self, taken: int) -> None:
        """A batch of `taken` messages was polled against the current target."""
        if taken >= self.target:
            self.target = min(self.target * 2, self.most)
        elif taken <= self.target // 4:
            self.target = max(self.base, self.target // 2)
