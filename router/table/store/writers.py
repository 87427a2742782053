"""The route script's callers in a table's writers hash, and forgetting the idle ones.

Each caller of the route script (`router/table/store/lua/route.lua`) is a field of the
writers hash: its last write count, with which it notices that the table lost its latest
writes (a Redis crash under `appendfsync everysec`, a failover to a replica behind), and
the server time of that call. A unit process is one caller, so the hash would gain a field
per process ever started; the sweeper forgets callers idle for `writer_idle_s`
(`sweeper.writer_idle_s`, a day by default: `forget_idle_writers`). A caller that has been
idle for half of that does not ask for the check on its next call (`seen_writes`): a
forgotten caller's missing field would otherwise look like a lost write and reset the table
for everyone. The check is skipped only once per such idle spell, and a write made half a
day ago (or half of a shorter bound: minutes) is on disk whatever the fsync policy.
"""

from __future__ import annotations

import time
from typing import Any

from router.table.store.codec import TableKeys, script

WRITER_IDLE_S = 24 * 3600  # by default, a caller silent for a day is forgotten by the sweeper


class WritersTable:
    keys: TableKeys
    client: Any
    writer_idle_s: int  # sweeper.writer_idle_s
    writes: int | None  # the write count of this caller's last route call, as it returned
    _routed_at: float | None  # time.monotonic() of that call

    def seen_writes(self) -> str:
        """What this caller asks the route script to check: '' (nothing) if it never
        routed, or if it was idle long enough that the sweeper may have forgotten it."""
        if self.writes is None or self._routed_at is None:
            return ""
        if time.monotonic() - self._routed_at > self.writer_idle_s / 2:
            return ""
        return str(self.writes)

    def forget_idle_writers(self, idle_s: float | None = None) -> tuple[int, int]:
        """Remove the callers idle for `idle_s` (default `writer_idle_s`; by the Redis
        server's clock); (forgotten, kept). Callers written before calls were stamped are
        stamped now."""
        if idle_s is None:
            idle_s = self.writer_idle_s
        lua = self.__dict__.get("_writers")
        if lua is None:  # registered on first use: the sweeper only
            lua = self.__dict__["_writers"] = self.client.register_script(script("writers"))
        gone, kept = lua(keys=[self.keys.writers], args=[int(idle_s)])
        return int(gone), int(kept)
