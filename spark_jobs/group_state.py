"""The receiver's stateful step as Spark runs it: pandas frames <-> `groups.step`.

This is the only code of ours that runs on Spark's executors (inside
`applyInPandasWithState`), so it imports nothing but pandas and `spark_jobs.groups`:
on a cluster the executors need pandas and pyarrow (PySpark's own requirements for
pandas functions) and the `spark_jobs` package (`--py-files`), not the router.

A key's state is `groups.State` in two columns: its metadata as JSON and the payloads
of the messages it holds, concatenated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from spark_jobs import groups

STATE_SCHEMA = "meta STRING, blob BINARY"
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


def _deadline(state: Any, at_ms: int) -> int:
    """An event-time timeout no earlier than the key's previous one, and (as Spark
    requires) after the current watermark."""
    previous = state.oldTimeoutTimestamp
    watermark = state.getCurrentWatermarkMs()
    return int(max(at_ms, previous, watermark + 1))


def checker(group_timeout_ms: int, dedupe_horizon_ms: int) -> Any:
    """The applyInPandasWithState function (EventTimeTimeout): `groups.step` over Spark's
    group state. Messages `parse` found a problem with are violations at once and leave
    the state as it is (a later gap in the group's sequence then breaks the group).

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
        messages: list[groups.Message] = []
        outcomes: list[groups.Outcome] = []
        for frame in frames:
            for row in frame.itertuples(index=False):
                m = _message(row)
                if row.problem is None:
                    messages.append(m)
                else:
                    outcomes.append(groups.Outcome(groups.VIOLATION, m, row.problem))
        if messages:
            current = groups.State.load(*state.get) if state.exists else None
            new, found = groups.step(guarantee_id, current, messages)
            outcomes.extend(found)
            state.update(new.dump())
            newest = max(m.created_ms for m in [*messages, *new.members])
            horizon = dedupe_horizon_ms if new.status == "done" else group_timeout_ms
            state.setTimeoutTimestamp(_deadline(state, newest + horizon))
        if outcomes:
            yield _frame(guarantee_id, outcomes)

    return check
