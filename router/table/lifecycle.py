"""The table model after routing (no I/O): a batch's settle after its Kafka commit, the
release of groups whose final is committed, and the sweep of idle entries; the Lua scripts
`settle.lua` and `sweep.lua` take the same steps (`router.table.model` routes; the property
test runs both side by side)."""

from __future__ import annotations

from collections.abc import Iterable

from router.table import room
from router.table.routing import NO_DEST, STOPPED, Swept
from router.table.state import TableState


class Lifecycle(TableState):
    """Settling, releasing and sweeping, on a table's state."""

    def settle(
        self,
        batch: str,
        dests: Iterable[str],
        finals: Iterable[tuple[str, str]],
        drains: Iterable[tuple[str, int] | tuple[str, int, int]] = (),
    ) -> int:
        """After a batch's commit: end its in-flight leases, release its finals, free the
        destinations of the groups it stopped (token STOPPED), open (or release) the
        admitted groups it drained ((gid, parks seen), `router.table.room.drained`) unless
        it parked into them too, end its park leases, and admit waiting groups to the
        destinations that became clean."""
        for d in dests:
            self.inflight.pop((d, batch), None)
        drains = list(drains)
        reached = {gid: n[0] for gid, _, *n in drains if n}
        released = self.release(finals, reached)
        # The batch's own park leases still count for its drains: a replayed park (its
        # first batch aborted) is not counted again, and only its lease shows that a
        # record of the group came after the drain's check (test_replayed_parks).
        for gid, parks_seen, *next_seq in drains:
            room.drained(self, gid, parks_seen, *next_seq)
        for key in [k for k in self.park_leases if k[1] == batch]:
            del self.park_leases[key]
        room.admit(self)
        return released

    def release(
        self, finals: Iterable[tuple[str, str]], reached: dict[str, int] | None = None
    ) -> int:
        """Remove entries whose routed final (gid, token) is now committed in Kafka; a
        group in logical order is remembered as finished (`done`) with its next number, or
        the one its drain `reached`, until its deadline.

        The token "*" (an operator's manual release) matches any entry, "@<destination>"
        (an operator's eviction) any entry on that destination. The token STOPPED
        frees a stopped group's destination and keeps its entry (not counted)."""
        released = 0
        for gid, token in finals:
            entry = self.entries.get(gid)
            if entry is None:
                continue
            if token == STOPPED:
                if entry.closing == STOPPED:
                    self.unload(entry.dest)
                    entry.dest = NO_DEST
            elif token in (entry.closing, "*", "@" + entry.dest):
                self.unload(self.entries.pop(gid).dest)
                room.forget(self, gid)
                released += 1
                if entry.next >= 0:  # an earlier group of the ID: the larger of each
                    n, x = self.done.get(gid, (-1, 0))
                    n = max(n, entry.next, (reached or {}).get(gid, -1))
                    self.done[gid] = (n, max(x, entry.deadline_ms))
        room.admit(self)
        return released

    def sweep(
        self, now_ms: int, limit: int | None = None, horizon_ms: int | None = None
    ) -> list[Swept]:
        """Remove entries idle past their TTL, oldest deadline first (ties by ID): those
        whose deadline is before `now_ms` and before `horizon_ms`, the time before which
        every record of the side's sources has been consumed (`router.sweeper.horizon`; None: no
        horizon). The others stay and are looked at again by the next sweep."""
        bound = now_ms if horizon_ms is None else min(now_ms, horizon_ms)
        expired = sorted(
            (e.deadline_ms, gid) for gid, e in self.entries.items() if e.deadline_ms < bound
        )
        if limit is not None:
            expired = expired[:limit]
        out = []
        for _, gid in expired:
            entry = self.entries.pop(gid)
            self.unload(entry.dest)
            room.forget(self, gid)
            out.append(Swept(gid, entry, now_ms))
        gone = sorted((x, g) for g, (_, x) in self.done.items() if x < bound)  # finished
        for _, gid in gone if limit is None else gone[:limit]:  # groups: the same bound
            del self.done[gid]
        room.admit(self)
        return out

    def open_groups(self, dest: str) -> int:
        return self.load.get(dest, 0)
