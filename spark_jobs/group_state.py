"""The receiver's stateful step as Spark runs it: rows <-> `groups.step`.

This is the only code of ours that runs on Spark's executors (inside Spark 4.1+'s
row-based `transformWithState`), so it imports nothing of ours but `spark_jobs.groups`,
besides pyspark: on a cluster the executors need the `spark_jobs` package
(`--py-files`) and PySpark's own requirements (pyarrow, pandas), not the router. Row-based,
not `transformWithStateInPandas`: no pandas frame in and out per key, which cost most of
each key's time (about 3x the keys per second; README, Spark bench).

`GroupProcessor` (a `StatefulProcessor`, `timeMode="EventTime"`) keeps per key
(a guarantee ID):

* `meta`, a value state: `groups.State.meta_json()` (status, queue, partition, the
  finished group's record IDs by seq, the reason of a broken or expired group, skipped
  seqs) and `timer`, the event-time timer the key has registered;
* `members`, a list state: an open group's accepted members (`groups.MEMBER_SCHEMA`,
  payload included), appended as they are accepted: a new member never rewrites the
  ones before it (a state of one row per group rewritten whole costs O(n^2) bytes for a
  group of n members arriving one by one). It is cleared when the group finishes, breaks
  or expires, and rewritten only when an expired segment takes its message's earlier
  segments out (`groups`, lifetime);
* one event-time timer: an open group's timeout (`group_timeout_ms` after its newest
  member's creation time), or a finished group's dedupe horizon (`dedupe_horizon_ms`).

Ordinary messages come in buckets (key: no guarantee ID, a bucket number), their copies
already dropped by Spark (`api.complete_groups`): each is a record, or expired, with no
state at all.

No TTL: Spark's state TTL counts processing time, so a receiver down longer than the TTL
would forget markers (and report copies as new records) that one never stopped keeps:
verdicts would depend on downtime. The dedupe horizon is an event-time timer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from spark_jobs import groups

META_SCHEMA = "meta STRING, timer BIGINT"  # the value state
NO_TIMER = -1
OUTCOME_SCHEMA = (
    "output STRING, guarantee_id STRING, record_id STRING, schema STRING, queue STRING, "
    "partition INT, offset BIGINT, seq BIGINT, final BOOLEAN, created_ms BIGINT, "
    "value BINARY, reason STRING, members_record_id ARRAY<STRING>, members_seq ARRAY<BIGINT>, "
    "members_offset ARRAY<BIGINT>, members_created_ms ARRAY<BIGINT>, "
    "members_value ARRAY<BINARY>, multicast BOOLEAN, parts ARRAY<BIGINT>, "
    "members_parts ARRAY<ARRAY<BIGINT>>"
)
Outcome = Row(*[column.split()[0] for column in OUTCOME_SCHEMA.split(", ")])


def _row(guarantee_id: str | None, o: groups.Outcome) -> Any:
    """An outcome as a row of OUTCOME_SCHEMA (a GROUP row carries its members as arrays)."""
    m = o.message if o.message is not None else o.members[-1]
    ms = o.members

    def each(field: str) -> list[Any] | None:
        return [getattr(x, field) for x in ms] if ms else None

    return Outcome(
        o.output,
        None if o.ordinary else guarantee_id,
        None if ms else (m.record_id or None),
        m.schema or None,
        m.queue,
        m.partition,
        m.offset,
        m.seq,
        m.final,
        m.created_ms,
        None if ms else m.value,
        o.reason,
        each("record_id"),
        each("seq"),
        each("offset"),
        each("created_ms"),
        each("value"),
        m.multicast,
        list(m.parts) if m.parts and not ms else None,
        [list(x.parts or (x.offset,)) for x in ms] if ms else None,
    )


def _message(row: Any) -> groups.Message:
    """One input row; an unreadable message has no record ID, schema or creation time."""
    segment = None
    if row.segment_id is not None:
        segment = groups.Seg(
            row.segment_id,
            int(row.segment_index),
            bool(row.segment_last),
            None if row.segment_bytes is None else int(row.segment_bytes),
            row.segment_sha256,
        )
    return groups.Message(
        row.record_id or "",
        row.schema or "",
        row.queue,
        int(row.partition),
        int(row.offset),
        int(row.seq),
        bool(row.final),
        0 if row.created_ms is None else int(row.created_ms),
        b"" if row.value is None else bytes(row.value),
        bool(row.complete),
        segment,
        row.expired,
        bool(row.expire_group),
        bool(row.multicast),
    )


def _read(rows: Iterable[Any]) -> tuple[list[groups.Message], list[groups.Outcome]]:
    """A key's input rows: the messages for `groups.step`, and the violations of those
    `parse` found a problem with (they leave the state as it is: a later gap in the
    group's sequence then breaks the group)."""
    messages: list[groups.Message] = []
    outcomes: list[groups.Outcome] = []
    for row in rows:
        m = _message(row)
        if row.problem is None:
            messages.append(m)
        else:
            outcomes.append(groups.Outcome(groups.VIOLATION, m, row.problem))
    return messages, outcomes


def _due(
    state: groups.State,
    messages: list[groups.Message],
    group_timeout_ms: int,
    dedupe_horizon_ms: int,
) -> int:
    """When the key's timer is due in event time: an open group `group_timeout_ms` after
    its newest message's creation time, anything else `dedupe_horizon_ms` after it."""
    newest = max(m.created_ms for m in [*messages, *state.members])
    horizon = dedupe_horizon_ms if state.status == "done" else group_timeout_ms
    return newest + horizon


class GroupProcessor(StatefulProcessor):  # type: ignore[misc]
    """`groups.step` as a `StatefulProcessor` for `transformWithState` (row-based,
    `timeMode="EventTime"`, "Append"): see the module's docstring for the state.

    Timers are event time: an open group times out `group_timeout_ms` after the creation
    time of its newest message, a finished group is forgotten `dedupe_horizon_ms` after
    it, and either happens only once the watermark (the newest
    creation time read, less the allowed lateness) has passed that instant. A key's
    timer never moves earlier and is always after the current watermark, so a receiver
    that was down, or catches up in small micro-batches, reaches the same verdicts as one
    that never stopped. State calls are round trips to the executor's JVM, so a key
    makes as few as it can: one `get` of its metadata, its members only if it is an open
    group, one `update`, and a timer call only when the instant moves."""

    def __init__(self, group_timeout_ms: int, dedupe_horizon_ms: int) -> None:
        self.group_timeout_ms = group_timeout_ms
        self.dedupe_horizon_ms = dedupe_horizon_ms

    def init(self, handle: Any) -> None:
        self.handle = handle
        # No TTL (processing time): the timers below forget a key.
        self.meta = handle.getValueState("meta", META_SCHEMA)
        self.members = handle.getListState("members", groups.MEMBER_SCHEMA)

    def _load(self) -> tuple[groups.State, int] | None:
        """The key's state and its timer (NO_TIMER if none), or None for a new key. Only
        an open group has members to read."""
        stored = self.meta.get()
        if stored is None:
            return None
        meta_json, timer = stored
        meta = json.loads(meta_json)
        rows = self.members.get() if meta["status"] == "open" else ()
        return groups.State.from_meta(meta, rows), int(timer)

    def _save(self, before: list[groups.Message], new: groups.State, timer: int) -> None:
        self.meta.update((new.meta_json(), timer))
        added = new.appended(before)
        if added is None:  # members dropped: cleared (or, rarely, rewritten)
            if new.members:
                self.members.put([groups.member_row(m) for m in new.members])
            elif before:
                self.members.clear()
        elif added:
            self.members.appendList([groups.member_row(m) for m in added])

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        guarantee_id = key[0]
        messages, outcomes = _read(rows)
        if guarantee_id is None:  # a bucket of ordinary messages, copies already dropped
            outcomes.extend(groups.ordinary(m) for m in messages)
        elif messages:
            loaded = self._load()
            current, timer = loaded if loaded is not None else (None, NO_TIMER)
            before = list(current.members) if current is not None else []
            new, found = groups.step(guarantee_id, current, messages)
            outcomes.extend(found)
            due = _due(new, messages, self.group_timeout_ms, self.dedupe_horizon_ms)
            watermark = int(timerValues.getCurrentWatermarkInMs())
            deadline = int(max(due, timer, watermark + 1))
            if deadline != timer:
                if timer != NO_TIMER:
                    self.handle.deleteTimer(timer)
                self.handle.registerTimer(deadline)
            self._save(before, new, deadline)
        for o in outcomes:
            yield _row(guarantee_id, o)

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[Any]:
        """The key's timer fired: an open group is incomplete; every key is forgotten."""
        loaded = self._load()
        self.meta.clear()
        if loaded is None:
            return
        if loaded[0].members:
            self.members.clear()
        for o in groups.expire(loaded[0], self.group_timeout_ms):
            yield _row(key[0], o)

    def close(self) -> None:
        pass
