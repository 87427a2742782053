"""The receiver's stateful step as Spark runs it: pandas frames <-> `groups.step`.

This is the only code of ours that runs on Spark's executors (inside
`transformWithStateInPandas`), so it imports nothing of ours but `spark_jobs.groups`,
besides pandas and pyspark: on a cluster the executors need pandas and pyarrow (PySpark's
own requirements for pandas functions) and the `spark_jobs` package (`--py-files`), not
the router.

`GroupProcessor` (a `StatefulProcessor`, `timeMode="EventTime"`) keeps per key
(guarantee ID, or ordinary record ID):

* `meta`, a value state: `groups.State.meta_json()` (status, queue, partition, the
  finished group's record IDs by seq, the reason of a broken or expired group, skipped
  seqs) and `timer`, the event-time timer the key has registered;
* `members`, a list state: an open group's accepted members (`groups.MEMBER_SCHEMA`,
  payload included), appended as they are accepted: a new member never rewrites the
  ones before it (the previous design rewrote the whole group, O(n^2) bytes for a group
  of n members arriving one by one). It is cleared when the group finishes, breaks or
  expires, and rewritten only when an expired segment takes its message's earlier
  segments out (`groups`, lifetime);
* one event-time timer: an open group's timeout (`group_timeout_ms` after its newest
  member's creation time), or a finished key's dedupe horizon (`dedupe_horizon_ms`).

No TTL: Spark 4.0's state TTL counts processing time, so a receiver down longer than
the TTL would forget markers (and report copies as new records) that one never stopped
keeps: verdicts would depend on downtime. The dedupe horizon is an event-time timer.

`checker` is the previous `applyInPandasWithState` step (one state row: metadata JSON
and the members' payloads concatenated), kept for Spark Connect 4.0.0, whose client has
no `transformWithStateInPandas` (`api.complete_groups` picks).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from spark_jobs import groups

STATE_SCHEMA = "meta STRING, blob BINARY"  # `checker`'s state (applyInPandasWithState)
META_SCHEMA = "meta STRING, timer BIGINT"  # `GroupProcessor`'s value state
NO_TIMER = -1
OUTCOME_SCHEMA = (
    "output STRING, guarantee_id STRING, record_id STRING, schema STRING, queue STRING, "
    "partition INT, offset BIGINT, seq BIGINT, final BOOLEAN, created_ms BIGINT, "
    "value BINARY, reason STRING, members_record_id ARRAY<STRING>, members_seq ARRAY<BIGINT>, "
    "members_offset ARRAY<BIGINT>, members_created_ms ARRAY<BIGINT>, "
    "members_value ARRAY<BINARY>, multicast BOOLEAN, parts ARRAY<BIGINT>, "
    "members_parts ARRAY<ARRAY<BIGINT>>"
)
_COLUMNS = [column.split()[0] for column in OUTCOME_SCHEMA.split(", ")]


def _frame(guarantee_id: str | None, outcomes: list[groups.Outcome]) -> Any:
    """Outcomes as rows of OUTCOME_SCHEMA (a GROUP row carries its members as arrays)."""
    columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
    for o in outcomes:
        m = o.message if o.message is not None else o.members[-1]
        members = o.members or None
        columns["output"].append(o.output)
        columns["guarantee_id"].append(None if o.ordinary else guarantee_id)
        columns["record_id"].append(None if members else (m.record_id or None))
        columns["schema"].append(m.schema or None)
        columns["queue"].append(m.queue)
        columns["partition"].append(m.partition)
        columns["offset"].append(m.offset)
        columns["seq"].append(m.seq)
        columns["final"].append(m.final)
        columns["created_ms"].append(m.created_ms)
        columns["value"].append(None if members else m.value)
        columns["reason"].append(o.reason)
        columns["members_record_id"].append(members and [x.record_id for x in members])
        columns["members_seq"].append(members and [x.seq for x in members])
        columns["members_offset"].append(members and [x.offset for x in members])
        columns["members_created_ms"].append(members and [x.created_ms for x in members])
        columns["members_value"].append(members and [x.value for x in members])
        columns["multicast"].append(m.multicast)
        columns["parts"].append(None if members or not m.parts else list(m.parts))
        columns["members_parts"].append(members and [list(x.parts or (x.offset,)) for x in members])
    return pd.DataFrame(columns)


def _segment(row: Any) -> groups.Seg | None:
    if row.segment_id is None:
        return None
    total = None if pd.isna(row.segment_bytes) else int(row.segment_bytes)
    return groups.Seg(
        row.segment_id, int(row.segment_index), bool(row.segment_last), total, row.segment_sha256
    )


def _message(row: Any) -> groups.Message:
    """One input row; an unreadable message has no record ID, schema or creation time."""
    return groups.Message(
        row.record_id or "",
        row.schema or "",
        row.queue,
        int(row.partition),
        int(row.offset),
        int(row.seq),
        bool(row.final),
        int(row.created_ms) if pd.notna(row.created_ms) else 0,
        b"" if row.value is None else bytes(row.value),
        bool(row.complete),
        _segment(row),
        row.expired,
        bool(row.expire_group),
        bool(row.multicast),
    )


def _read(frames: Iterator[Any]) -> tuple[list[groups.Message], list[groups.Outcome]]:
    """A key's input rows: the messages for `groups.step`, and the violations of those
    `parse` found a problem with (they leave the state as it is: a later gap in the
    group's sequence then breaks the group)."""
    messages: list[groups.Message] = []
    outcomes: list[groups.Outcome] = []
    for frame in frames:
        for row in frame.itertuples(index=False):
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


def _deadline(state: Any, at_ms: int) -> int:
    """An event-time timeout no earlier than the key's previous one, and (as Spark
    requires) after the current watermark."""
    previous = state.oldTimeoutTimestamp
    watermark = state.getCurrentWatermarkMs()
    return int(max(at_ms, previous, watermark + 1))


def checker(group_timeout_ms: int, dedupe_horizon_ms: int) -> Any:
    """The applyInPandasWithState function (EventTimeTimeout), for Spark Connect 4.0.0:
    `groups.step` over one state row per key, the same verdicts as `GroupProcessor`.

    Timeouts are event time: an open group times out `group_timeout_ms` after the
    creation time of its newest message, a finished group or ordinary record is
    forgotten `dedupe_horizon_ms` after it, and either happens only once the watermark
    (the newest creation time read, less the allowed lateness) has passed that instant.
    So a receiver that was down, or catches up in small micro-batches, reaches the same
    verdicts as one that never stopped."""

    def check(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        guarantee_id = key[0]
        if state.hasTimedOut:
            expired = groups.expire(groups.State.load(*state.get), group_timeout_ms)
            state.remove()
            if expired:
                yield _frame(guarantee_id, expired)
            return
        messages, outcomes = _read(frames)
        if messages:
            current = groups.State.load(*state.get) if state.exists else None
            new, found = groups.step(guarantee_id, current, messages)
            outcomes.extend(found)
            state.update(new.dump())
            due = _due(new, messages, group_timeout_ms, dedupe_horizon_ms)
            state.setTimeoutTimestamp(_deadline(state, due))
        if outcomes:
            yield _frame(guarantee_id, outcomes)

    return check


class GroupProcessor(StatefulProcessor):  # type: ignore[misc]
    """`groups.step` as a `StatefulProcessor` for `transformWithStateInPandas`
    (`timeMode="EventTime"`, "Append"): see the module's docstring for the state.

    Timers are event time, with the verdicts of `checker`: an open group times out
    `group_timeout_ms` after the creation time of its newest message, a finished group or
    ordinary record is forgotten `dedupe_horizon_ms` after it, and either happens only
    once the watermark (the newest creation time read, less the allowed lateness) has
    passed that instant. A key's timer never moves earlier and is always after the
    current watermark (as `applyInPandasWithState` requires of its timeouts), so a
    receiver that was down, or catches up in small micro-batches, reaches the same
    verdicts as one that never stopped."""

    def __init__(self, group_timeout_ms: int, dedupe_horizon_ms: int) -> None:
        self.group_timeout_ms = group_timeout_ms
        self.dedupe_horizon_ms = dedupe_horizon_ms

    def init(self, handle: Any) -> None:
        self.handle = handle
        # No TTL (processing time in Spark 4.0): the timers below forget a key.
        self.meta = handle.getValueState("meta", META_SCHEMA)
        self.members = handle.getListState("members", groups.MEMBER_SCHEMA)

    def _load(self) -> tuple[groups.State, int] | None:
        """The key's state and its timer (NO_TIMER if none), or None for a new key. Only
        an open group has members to read."""
        if not self.meta.exists():
            return None
        meta_json, timer = self.meta.get()
        rows = self.members.get() if json.loads(meta_json)["status"] == "open" else ()
        return groups.State.from_stored(meta_json, rows), int(timer)

    def _save(self, before: list[groups.Message], new: groups.State, timer: int) -> None:
        self.meta.update((new.meta_json(), timer))
        added = new.appended(before)
        if added is None:  # members dropped: cleared (or, rarely, rewritten)
            if new.members:
                self.members.put([groups.member_row(m) for m in new.members])
            else:
                self.members.clear()
        elif added:
            self.members.appendList([groups.member_row(m) for m in added])

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        guarantee_id = key[0]
        messages, outcomes = _read(rows)
        if messages:
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
        if outcomes:
            yield _frame(guarantee_id, outcomes)

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[Any]:
        """The key's timer fired: an open group is incomplete; every key is forgotten."""
        loaded = self._load()
        self.meta.clear()
        self.members.clear()
        if loaded is None:
            return
        expired = groups.expire(loaded[0], self.group_timeout_ms)
        if expired:
            yield _frame(key[0], expired)

    def close(self) -> None:
        pass
