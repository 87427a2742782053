"""A management table's route calls: a batch in bounded chunks, each one call of
`router/table/store/lua/route.lua`, the members the caller's memory decides left out
(`router.table.store.memory`). Mixed into `router.table.store.management.ManagementTable`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from router.table.routing import HELD, SKIPPED, RouteRequest, RouteResult
from router.table.store.codec import encode
from router.table.store.codec import text as _text
from router.table.store.memory import STALE, GroupMemory, Split
from router.table.store.owners import FENCED, LaneFenced

# Bounds on one route call's work (Redis runs one script at a time, for every unit): a
# batch larger than this is routed in several calls.
CALL_REQUESTS = 2_000
CALL_WORK = 20_000  # requests x destinations


class RouteCalls:
    destinations: list[str]
    policy: str
    max_staged: int
    homes: int
    lease_ms: int
    epoch: str
    writes: int | None
    writer: str
    resets: int
    memory: GroupMemory | None
    claims: dict[str, str]
    _route: Any
    _route_keys: list[str]
    _routed_at: float | None
    _dests: list[str | int]

    if TYPE_CHECKING:  # (router.table.store.owners, router.table.store.writers)

        def fences(self, lanes: Iterable[str]) -> list[str]: ...

        def seen_writes(self) -> str: ...

    def route(
        self,
        requests: Sequence[RouteRequest],
        now_ms: int | None = None,
        batch: str = "batch",
        carried: Sequence[tuple[str, str]] = (),
        earlier: Sequence[str] = (),
    ) -> RouteResult:
        """Decide a destination for every request of a batch: one round trip per chunk
        of `chunk_size` requests, so that no call blocks Redis for long. `carried`: finals
        (gid, token) the caller routed in its `earlier` batches, whose transactions commit
        before this batch's records are written: their groups, if not released yet, free
        their destinations for this batch as a final routed in it would (a new group of
        the final's lane may follow it there; `router.table.model`). A chunk carries the
        finals its batch routed in the chunks before it."""
        if "|" in batch:
            raise ValueError(f"a batch ID may not contain '|': {batch!r}")
        if not requests:
            return RouteResult([], 0, 0, 0)
        for r in requests:
            if r.targets and not set(r.targets) <= set(self.destinations):
                raise ValueError(f"multicast to unknown destinations: {r.targets}")
        size = self.chunk_size
        if len(requests) <= size:
            return self._route_chunk(requests, now_ms, batch, carried, earlier)
        carry = list(carried)
        dests = set(self.destinations)
        # A lane held in one chunk stays held for the rest of the batch.
        decisions: list[str] = []
        counts = [0] * 5
        held: set[str] = set()
        for start in range(0, len(requests), size):
            chunk = requests[start : start + size]
            sent = [r for r in chunk if r.lane not in held]
            result = (
                self._route_chunk(sent, now_ms, batch, carry, earlier)
                if sent
                else RouteResult([], 0, 0, 0)
            )
            got = iter(result.decisions)
            for r in chunk:
                d = next(got) if r.lane not in held else SKIPPED
                if d == HELD:
                    held.add(r.lane)
                elif r.final and r.guarantee_id is not None and d in dests:
                    carry.append((r.guarantee_id, r.token))
                decisions.append(d)
            res = result
            for i, n in enumerate((res.shared, res.held, res.created, res.stopped, res.orphans)):
                counts[i] += n
        return RouteResult(decisions, *counts)

    @property
    def chunk_size(self) -> int:
        """Requests per route call: at most CALL_REQUESTS, and at most CALL_WORK
        request x destination steps (choosing a destination looks at every one)."""
        return max(1, min(CALL_REQUESTS, CALL_WORK // len(self.destinations)))

    def _route_chunk(
        self,
        requests: Sequence[RouteRequest],
        now_ms: int | None,
        batch: str,
        carried: Sequence[tuple[str, str]] = (),
        earlier: Sequence[str] = (),
    ) -> RouteResult:
        memory, claims = self.memory, self.claims
        split = (
            memory.split(requests, claims, (g for g, _ in carried), now_ms)
            if memory is not None and claims
            else Split()
        )
        sent = [requests[i] for i in split.sent] if split.local else requests
        out = self._call(sent, now_ms, batch, carried, earlier, split)
        if out is None:  # the memory no longer held: nothing changed, everything sent
            assert memory is not None
            memory.forget()
            memory.stale += 1
            split, sent = Split(), requests
            out = self._call(sent, now_ms, batch, carried, earlier, split)
            assert out is not None
        reset = bool(int(out[6]))
        if reset:
            self.resets += 1
        self.epoch = _text(out[5])
        self.writes = int(out[7])  # this caller's own last write: what it checks next
        self._routed_at = time.monotonic()
        n = len(sent)
        decisions = [d.decode("utf-8") if isinstance(d, bytes) else d for d in out[8 : 8 + n]]
        if memory is not None:
            marked, generation = _text(out[8 + n]), _text(out[9 + n])
            memory.learn(
                sent, decisions, marked, generation, self.epoch, int(out[10 + n]), reset, claims
            )
            decisions = memory.merge(requests, split, decisions)
        return RouteResult(
            decisions,  # per message
            int(out[0]),
            int(out[1]),
            int(out[2]),
            int(out[3]),
            int(out[4]),
        )

    def _call(
        self,
        sent: Sequence[RouteRequest],
        now_ms: int | None,
        batch: str,
        carried: Sequence[tuple[str, str]],
        earlier: Sequence[str],
        split: Split,
    ) -> Any:
        """One route call for `sent`, the others of the batch decided by the memory
        (`split`): the script's reply, or None if it found the memory stale."""
        lanes = {r.lane for r in sent} | split.lanes  # (the memory's lanes are fenced too)
        args = self.head_args(batch, now_ms, carried, earlier, lanes)
        memory = self.memory
        args += split.args(memory.generation if memory is not None else "")
        encoded = [encode(r) for r in sent]
        for column in range(3):  # the script reads the messages' values in three columns
            args += [e[column] for e in encoded]
        out = self._route(keys=self._route_keys, args=args)
        first = int(out[0])
        if first == FENCED:
            raise LaneFenced(_text(out[1]))
        return None if first == STALE else out

    def head_args(
        self,
        batch: str,
        now_ms: int | None = None,
        carried: Sequence[tuple[str, str]] = (),
        earlier: Sequence[str] = (),
        lanes: Iterable[str] = (),
    ) -> list[Any]:
        """The leading arguments of the route script; `encode` gives 3 per message.
        `lanes`: those the call speaks for, fenced by this caller's claims on them."""
        tail: list[Any] = [len(carried)]
        for gid, token in carried:
            tail += (gid, token)
        tail += (len(earlier), *earlier)
        tail += self.fences(lanes)
        return [
            "" if now_ms is None else now_ms,
            f"{self.policy}:{self.max_staged}:{self.homes}",
            batch,
            self.lease_ms,
            self.epoch,
            f"{self.seen_writes()}:{self.writer}",
            *self._dests,
            *tail,
        ]
