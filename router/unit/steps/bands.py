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
* Both sides, `retarget` also marks the *barriers* of the batch (`barriers`): the table
  decides a batch in order and counts on its records reaching each destination in that
  order (a final frees its destination for the rest of the batch; the batch's own
  ordinary messages on a destination do not keep a new group of the same batch off it),
  which holds for one partition, not for a destination's band topics: a transaction's
  records on two partitions are appended in no particular order. Where a destination's
  records change band topic and a group's record is involved, every earlier record must
  be on the broker first (`TransactionalSession.produce` flushes there).
* Send side, `settle`: a group whose final was committed is forgotten with the next call
  (unless a later call, or a later message of the same batch, used the ID again); a band
  unused for `keep_ms` is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import Any, cast

import redis

from router import contract
from router.backends.redis.client import RedisClient
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
        self, client: RedisClient, keys: TableKeys, keep_ms: int, metrics: Metrics | None = None
    ) -> None:
        self.keys = keys.named("bands bands_at bands_calls")  # the send table's hash slot
        self.keep_ms = keep_ms
        self.metrics = metrics
        text = resources.files("router.table.store").joinpath("lua", "bands.lua").read_text("utf-8")
        self._script: Any = cast(Any, client).register_script(text)

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
        """Both sides: records for a destination go to their band's topic; the batch's
        barriers (`barriers`) are marked in `out.barriers`."""
        dests = self.destinations
        records = out.records
        placed: list[tuple[tuple[str, int], int, bool] | None] = []
        for i, r in enumerate(records):
            if r.topic in dests:
                band = min(priority.stamped_band(r.headers), self.bands - 1)
                if band:
                    records[i] = Record(priority.band_topic(r.topic, band), *r[1:])
                placed.append(((r.topic, r.partition), band, _grouped(r.headers)))
            else:
                placed.append(None)
        out.barriers = barriers(placed)

    def settle(self, batch: Batch, out: Output) -> None:
        """Send side, after the batch committed: its ended groups are forgotten next call."""
        call = batch.extra.get("band_call")
        if call is None or self.table is None:
            return
        again = _reused(batch)
        self._forget += [(gid, call) for gid, _ in out.finals if gid not in again]
        self._forget += [(gid, call) for gid in out.stopped if gid not in again]


def _grouped(headers: Any) -> bool:
    """Whether a record belongs to a group (a member, or a close or skip marker)."""
    return any(k == contract.GUARANTEE_ID for k, _ in headers or ())


def barriers(placed: list[tuple[tuple[str, int], int, bool] | None]) -> list[int]:
    """Where a batch's records must wait for every earlier one to be on the broker (pure).
    `placed`: per record in produce order, (destination, band, a group's record) or None
    (not for a destination). A record on a destination whose earlier records of the batch
    went to another band topic waits if it, or one of those, is a group's record: a
    group's first record must follow what the batch wrote there before, and whatever the
    batch writes there after a group's final must follow that final, on every band topic.
    Ordinary records alone may mix bands freely. After a barrier everything is appended,
    so the search starts afresh."""
    out: list[int] = []
    bands: dict[tuple[str, int], set[int]] = {}
    grouped: set[tuple[str, int]] = set()
    for i, p in enumerate(placed):
        if p is None:
            continue
        dest, band, group = p
        seen = bands.setdefault(dest, set())
        if seen - {band} and (group or dest in grouped):
            out.append(i)
            bands, grouped = {dest: set()}, set()
            seen = bands[dest]
        seen.add(band)
        if group:
            grouped.add(dest)
    return out


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
