"""The emitter's alerts (pure): the events a batch writes when a poison message stops its
group (GroupStopped) and when a staged group goes over the staging bound
(GroupStagingAborted), on the events topic, in the batch's transaction."""

from __future__ import annotations

import logging
from typing import Protocol

from router.contract import events
from router.unit.steps.batch import Item, where
from router.unit.steps.emit.records import Emitting, Output, Record

log = logging.getLogger("router.emit")


class Alerting(Emitting, Protocol):
    @property
    def max_staged(self) -> int: ...

    def event(self, schema: str, key: bytes | None, record: bytes) -> Record: ...


def group_stopped(e: Alerting, item: Item, gid: str, now_ms: int, out: Output) -> None:
    """The GroupStopped event of a poison message that stops its group."""
    m, bad = item.m, item.bad
    assert bad is not None
    out.groups_stopped += 1
    log.error("stopping group %r at %s: %s (policy stop-group)", gid, where(m), bad)
    record = events.group_stopped(
        gid,
        bad,
        side=e.spec.side,
        topology=e.topology,
        unit=e.unit,
        topic=m.topic(),
        partition=m.partition(),
        offset=m.offset(),
        now_ms=now_ms,
    )
    out.records.append(e.event(events.GROUP_STOPPED, gid.encode(), record))


def staging_aborted(e: Alerting, item: Item, now_ms: int, out: Output) -> Record:
    """A staged group went over routing.max_staged_messages: it now waits streamed."""
    m, r, bad = item.m, item.routing, item.bad
    gid = (r.guarantee_id if r is not None else bad.guarantee_id if bad else None) or ""
    out.staging_aborted += 1
    log.warning(
        "group %r staged %d messages without its final: delivered streamed (%s)",
        gid,
        e.max_staged,
        where(m),
    )
    record = events.group_staging_aborted(
        gid,
        side=e.spec.side,
        topology=e.topology,
        unit=e.unit,
        staged=e.max_staged,
        max_staged=e.max_staged,
        topic=m.topic(),
        partition=m.partition(),
        offset=m.offset(),
        now_ms=now_ms,
    )
    return e.event(events.GROUP_STAGING_ABORTED, gid.encode(), record)


__all__ = ["group_stopped", "staging_aborted"]
