"""Settling a batch after its Kafka commit (`settle.lua`): its leases end, its finals release
their groups, its drains open the admitted groups they forwarded, and waiting groups are
admitted. Mixed into `router.table.store.management.ManagementTable`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from router.table.store.codec import text as _text
from router.table.store.owners import OwnersTable, fence_args

log = logging.getLogger(__name__)


class SettleTable(OwnersTable):
    keys: Any
    _r: Any
    _settle: Any
    _settle_keys: list[str]
    _dests: list[str | int]
    last_fenced: str | None  # the room lane whose newer claim fenced the last settle's drains

    def settle(
        self,
        batch: str,
        dests: Iterable[str],
        finals: Iterable[tuple[str, str]] = (),
        drains: Iterable[tuple[str, int] | tuple[str, int, int]] = (),
        claims: Mapping[str, str] | None = None,
    ) -> int:
        """After a batch's Kafka commit: end its in-flight leases on `dests` (where it sent
        ordinary messages) and its park leases, release the groups whose final (gid,
        token) it committed, open the admitted groups it drained ((gid, parks seen[,
        next sequence number]): `router.table.room.drained`) and admit waiting groups to
        destinations that became clean. `claims`: the room lanes the drains came from, with
        the caller's claim token on each as it was when it drained them: if another unit
        claimed one since, the drains are ignored (the table's `drains_fenced`; the lane in
        `last_fenced`, said in the log), the rest holds."""
        dest_list = list(dests)
        final_list = list(finals)
        drain_list = list(drains)
        args: list[str | int] = [batch, len(dest_list), *dest_list, len(final_list)]
        for gid, token in final_list:
            args += (gid, token)
        args.append(len(drain_list))
        for gid, parks, *next_seq in drain_list:
            args += (gid, parks, next_seq[0] if next_seq else -1)
        args += fence_args(claims or {})
        args += self._dests
        released, fenced = self._settle(keys=self._settle_keys, args=args)
        self.last_fenced = _text(fenced) if fenced else None
        if self.last_fenced and drain_list:
            log.warning(
                "batch %s: its drains are ignored: room lane %s was claimed by another unit",
                batch,
                self.last_fenced,
            )
        return int(released)

    def release(self, finals: Iterable[tuple[str, str]]) -> int:
        """Remove the entries of groups whose final message (gid, token) is committed."""
        return self.settle("", (), finals)

    def inflight(self) -> dict[tuple[str, str], int]:
        """(destination, batch) -> lease expiry of batches not yet settled."""
        out = {}
        for member, score in self._r.zrange(self.keys.inflight, 0, -1, withscores=True):
            dest, batch = _text(member).split("|", 1)
            out[(dest, batch)] = int(score)
        return out
