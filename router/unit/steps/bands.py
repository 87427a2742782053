"""Priority bands in a unit's steps (`router.contract.priority` says what a band is).

* Send side, `assign` (in the decide step, before routing): every message gets its band
  written in the header `router-band`: a message on a band send queue `<queue>.p<b>` is
  in band b, else its `message-priority` header's band; a group member takes its group's
  band, the one of the first member the router saw, kept in Redis beside the send table
  (`router/table/store/lua/bands.lua`, one round trip per batch with grouped messages), so that a
  group never changes band and its order never breaks. Redis away: the batch fails and is
  retried, like routing.
* Both sides, `retarget` (after the emit step): every record for a destination (a
  transfer partition, a receive queue) goes to the topic of the band its `router-band`
  header names; its control records (close and skip markers) carry the member's header,
  so they follow their group's band.
* Send side, `settle`: a group whose final was committed is forgotten with the next call
  (unless a later call, or a later message of the same batch, used the ID again); a band
  unused for `keep_ms` is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import Any

import redis

from router.contract import priority
from router.contract.headers import BadInput
from router.metrics.registry import Metrics
from router.table.store.codec import TableKeys
from router.unit.steps.batch import Batch, Item
from router.unit.steps.emit.records import Output, Record

MAX_FORGET = 1_000  # pending forgets that make a call of their own


class GroupBands:
    """The send side's group -> band table in Redis (one script, one round trip)."""

    def __init__(
        self, client: redis.Redis, keys: TableKeys, keep_ms: int, metrics: Metrics | None = None
    ) -> None:
        self.keys = keys.named("bands bands_at bands_calls")  # the send table's hash slot
        self.keep_ms = keep_ms
        self.metrics = metrics
        text = resources.files("router.table.store").joinpath("lua", "bands.lua").read_text("utf-8")
        self._script: Any = client.register_script(text)

    def resolve(
        self, pairs: list[tuple[str, int]], forget: list[tuple[str, int]]
    ) -> tuple[int, list[int]]:
        """(this call's number, the band of each (guarantee ID, own band) pair's group)."""
        args: list[str | int] = ["", self.keep_ms, len(forget)]
        for gid, call in forget:
            args += [gid, call]
        for gid, own in pairs:
            args += [gid, own]
        got = self._script(keys=self.keys, args=args)
        if self.metrics is not None:
            self.metrics.inc("redis_round_trips")
        return int(got[0]), [int(b) for b in got[1:]]


def _group(item: Item) -> str | None:
    r, bad = item.routing, item.bad
    return r.guarantee_id if r is not None else bad.guarantee_id if bad is not None else None


def own_band(item: Item, bases: frozenset[str], bands: int) -> int:
    """The band a message asks for: its band send queue's, else its header's."""
    _, band = priority.split(item.m.topic(), bases)
    if band:
        return min(band, bands - 1)
    try:
        return priority.band_of(priority.read(item.headers), bands)
    except BadInput:  # dead-lettered by the classify step as bad-priority
        return 0


class BandStep:
    def __init__(
        self,
        bands: int,
        sources: Iterable[str],
        destinations: Iterable[str],
        table: GroupBands | None,
    ) -> None:
        self.bands = bands
        self.sources = frozenset(sources)  # base send queues (send side)
        self.destinations = frozenset(destinations)  # base destination topics
        self.table = table
        self._forget: list[tuple[str, int]] = []

    def assign(self, batch: Batch) -> None:
        """Send side: write every item's band into its headers (see the module doc).
        Redis away: `batch.failure`, nothing of the batch is forwarded."""
        bands, bases = self.bands, self.sources
        grouped: list[tuple[Item, str, int]] = []
        for item in batch.items:
            if item.headers is None and item.routing is None and item.bad is not None:
                continue  # unreadable headers: dead-lettered, no band
            own = own_band(item, bases, bands)
            gid = _group(item)
            if gid is None or self.table is None:
                item.headers = priority.stamp(item.headers, own)
            else:
                grouped.append((item, gid, own))
        if not grouped and len(self._forget) < MAX_FORGET:
            return
        assert self.table is not None
        try:
            call, got = self.table.resolve([(g, b) for _, g, b in grouped], self._forget)
        except redis.RedisError as exc:
            batch.failure = f"Redis unavailable, nothing forwarded (group bands): {exc}"
            return
        self._forget = []
        batch.extra["band_call"] = call
        for (item, _, _), band in zip(grouped, got, strict=True):
            item.headers = priority.stamp(item.headers, min(band, bands - 1))

    def retarget(self, out: Output) -> None:
        """Both sides: records for a destination go to their band's topic."""
        dests = self.destinations
        records = out.records
        for i, r in enumerate(records):
            if r.topic in dests:
                band = priority.stamped_band(r.headers)
                if band:
                    records[i] = Record(
                        priority.band_topic(r.topic, min(band, self.bands - 1)), *r[1:]
                    )

    def settle(self, batch: Batch, out: Output) -> None:
        """Send side, after the batch committed: its ended groups are forgotten next call."""
        call = batch.extra.get("band_call")
        if call is None or self.table is None:
            return
        again = _reused(batch)
        self._forget += [(gid, call) for gid, _ in out.finals if gid not in again]
        self._forget += [(gid, call) for gid in out.stopped if gid not in again]


def _reused(batch: Batch) -> set[str]:
    """IDs used again after their group's final in this batch. Such a new group took the
    ended group's band in the same call (`bands.lua` cannot tell them apart), so the band
    is kept for it: forgetting it would put the rest of the new group in another band."""
    ended: set[str] = set()
    again: set[str] = set()
    for item in batch.items:
        gid = _group(item)
        if gid is None:
            continue
        if gid in ended:
            again.add(gid)
        r, bad = item.routing, item.bad
        if r.final if r is not None else bad is not None and bad.final:
            ended.add(gid)
    return again
