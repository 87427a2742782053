"""The emit step (pure): a decided batch -> the records its transaction produces.

Forwarded messages keep their key, value, headers and timestamp (the send side adds
`router-origin`); bad input becomes a dead letter with its reason; messages of stopped
groups and orphans are parked on the dead-letter topic, in order; alerts (GroupStopped,
TableReset) go to the events topic. Also returns what the settle step needs (finals
forwarded, destinations that got ordinary messages) and the batch's counts. No I/O: the
transactional session produces the records.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from router import contract
from router.config.settings import RouterSettings
from router.contract import events, lifetime, schemas
from router.contract.headers import BadInput
from router.table import room
from router.table.multicast import FANOUT
from router.table.room import UNSTAGED, WAIT
from router.table.routing import DUPLICATE, NO_DEST, ORPHAN, PARKED, SPANS, STOPPING
from router.topology.cells import room_partition
from router.topology.side import SideSpec
from router.unit.steps.batch import Batch, Item, where
from router.unit.steps.emit import alerts, fanout, letters, markers
from router.unit.steps.emit.reasons import gid_of, late_member, spans_partitions, token_of
from router.unit.steps.emit.records import TRACK_DELIVERY_BYTES, Output, Record, new_record

log = logging.getLogger("router.emit")


class Emitter:
    def __init__(
        self,
        settings: RouterSettings,
        spec: SideSpec,
        unit: str,
        room_partitions: Sequence[int] | None = None,
    ) -> None:
        self.spec = spec
        self._targets: dict[str, tuple[str, int]] = {}  # destination -> (topic, partition)
        self.unit = unit
        self.topology = settings.topology.name
        self.dead_letter_topic = settings.topology.dead_letter_topic
        self.events_topic = settings.topology.events_topic
        self.max_record = settings.kafka.max_message_bytes
        self.room_topic = settings.topology.room_topic(spec.side)
        # where it parks: every room partition, or its cell's (`router.topology.cells`)
        self.room_partitions: int | Sequence[int] = (
            settings.routing.room_partitions if room_partitions is None else room_partitions
        )
        self.max_staged = settings.routing.max_staged_messages
        self.on_expiry = settings.routing.on_expiry  # a group's default (router.contract.lifetime)
        # markers read a parked member's headers (router.unit.steps.emit.markers)
        self.rules = settings.routing

    def emit(self, batch: Batch, now_ms: int) -> Output:
        out = Output()
        if batch.table_reset is not None:
            previous, epoch = batch.table_reset
            record = events.table_reset(
                side=self.spec.side,
                topology=self.topology,
                previous=previous,
                epoch=epoch,
                unit=self.unit,
                now_ms=now_ms,
            )
            out.records.append(self.event(events.TABLE_RESET, None, record))
        spec = self.spec
        add_origin = spec.side == "send"
        targets = self._targets
        records = out.records
        held = bool(batch.held_at)
        for item in batch.items:
            if held and not batch.forwards(item):
                continue  # held, or behind a held message of its partition
            dest = item.decision
            if item.skip and dest not in (WAIT, UNSTAGED):  # routed as its member: no record
                out.skips += 1
                continue
            if item.close and dest == WAIT:  # its group waits: the close follows its parks
                records.append(self.park_in_room(item))
                out.parked_in_room += 1
                continue
            if item.close:  # the send side ended this group: release it, forward nothing
                out.closes += 1
                if dest and dest[0] != "!" and item.routing is not None:
                    out.finals.append((item.routing.guarantee_id or "", token_of(item)))
                continue
            if dest in (PARKED, ORPHAN):
                self._park(item, dest == ORPHAN, now_ms, out)
                continue
            if dest is not None and dest.startswith(STOPPING):
                self._park(item, False, now_ms, out)
                if add_origin and dest[2:] != NO_DEST:
                    records.append(self.close_marker(item, dest[2:], out))
                continue
            if dest == SPANS:
                out.lettered(item.bad or spans_partitions(item))
                records.append(self.dead_letter(item, item.bad or spans_partitions(item), now_ms))
                continue
            if dest == DUPLICATE:  # logical order: a late member of a finished group
                out.lettered(item.bad or late_member(item))
                out.seq_duplicates += item.bad is None
                records.append(self.dead_letter(item, item.bad or late_member(item), now_ms))
                continue
            if dest in (WAIT, UNSTAGED):  # a bad one too: dead-lettered in its place
                records.append(self.park_in_room(item))
                out.parked_in_room += 1
                if item.stop and item.bad is not None:
                    # it stopped an admitted group in the room: announced here, the drain
                    # dead-letters it and closes the group (router.unit.steps.drain.step)
                    alerts.group_stopped(self, item, gid_of(item), now_ms, out)
                if item.routing is not None and item.routing.complete:
                    out.staged_bytes += len(item.m.value() or b"")
                if dest == UNSTAGED:
                    records.append(alerts.staging_aborted(self, item, now_ms, out))
                continue
            if item.bad is not None:
                out.lettered(item.bad)
                records.append(self.dead_letter(item, item.bad, now_ms))
                r, bad = item.routing, item.bad
                gid, final = (r.guarantee_id, r.final) if r else (bad.guarantee_id, bad.final)
                if final and gid and dest and dest[0] != "!":
                    out.finals.append((gid, token_of(item)))
                    if add_origin:
                        records.append(self.close_marker(item, dest, out))
                elif gid and dest and dest[0] != "!" and add_origin:
                    records.append(self.skip_marker(item, dest, out))  # the group goes on
                continue
            assert dest is not None and item.routing is not None
            if dest.startswith(FANOUT):  # multicast (receive side): a copy per queue
                fanout.copies(self, item, dest, out)
                continue
            m = item.m
            where = targets.get(dest)
            if where is None:
                where = targets[dest] = spec.target(dest)
            topic, partition = where
            headers = item.headers
            if add_origin:
                origin = (contract.ORIGIN, f"{m.topic()}/{m.partition()}/{m.offset()}".encode())
                headers = [*headers, origin] if headers else [origin]
                if item.expires_ms is not None:  # the next hops judge by the same instant
                    headers = lifetime.stamped(headers, item.expires_ms)
            value = m.value()
            ts_type, ts = m.timestamp()
            big = value is not None and len(value) > TRACK_DELIVERY_BYTES
            source = (m.topic(), m.partition(), m.offset()) if big else None
            records.append(
                new_record(
                    Record,
                    (topic, partition, m.key(), value, headers, ts if ts_type else 0, source),
                )
            )
            out.forwarded += 1
            r = item.routing
            if r.guarantee_id is None:
                out.ordinary_dests.add(dest)
            else:
                out.grouped += 1
                if r.final:
                    out.finals.append((r.guarantee_id, token_of(item)))
        return out

    def dead_letter(
        self, item: Item, bad: BadInput, now_ms: int, source: tuple[str, int, int] | None = None
    ) -> Record:
        """The dead letter of `item`, with its reason; `source`: the position to report
        if not the record's own (a parked record's send-queue or transfer position). An expired
        message is not a dead letter: its ExpiredMessage event
        (`router.unit.steps.emit.letters`)."""
        if bad.code == lifetime.EXPIRED:
            key, value, headers = letters.expired_event(self, item, bad, now_ms, source)
            return Record(self.events_topic, -1, key, value, headers, 0, None)
        m = item.m
        ts_type, ts = m.timestamp()
        topic, partition, offset = source or (m.topic(), m.partition(), m.offset())
        record = events.dead_letter(
            bad,
            side=self.spec.side,
            unit=self.unit,
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp_ms=ts if ts_type else None,
            key=m.key(),
            value=m.value(),
            headers=item.headers,
            now_ms=now_ms,
            max_value_bytes=self.max_record,
        )
        headers = [
            (schemas.SCHEMA_HEADER, events.DEAD_LETTER.encode()),
            ("reason", bad.code.encode()),
        ]
        log.warning("dead-lettered %s: %s", where(m), bad)
        return Record(self.dead_letter_topic, -1, m.key(), record, headers, 0, None)

    def close_marker(self, item: Item, dest: str, out: Output, origin: str = "") -> Record:
        """The group of `item` ends here without its final forwarded
        (router.unit.steps.emit.markers)."""
        return markers.marker(self, item, dest, out, contract.CLOSE, origin)

    def skip_marker(self, item: Item, dest: str, out: Output, origin: str = "") -> Record:
        """`item`, a member of a group that goes on, is not forwarded
        (router.unit.steps.emit.markers)."""
        return markers.marker(self, item, dest, out, contract.SKIP, origin)

    def _park(self, item: Item, orphan: bool, now_ms: int, out: Output) -> None:
        """A message of a stopped group, or an orphan: dead-lettered, in order, and
        forwarded nowhere. A malformed one keeps its own reason; an expired one (its own
        reason too) is an ExpiredMessage event, counted as expired, not parked."""
        gid = gid_of(item)
        if orphan:
            out.orphans_parked += 1
            reason = item.bad or BadInput(
                "group-entry-missing",
                f"group {gid!r} continues (sequence > 0) but has no table entry: it expired "
                "or the table was lost; routing it anew could split the group",
            )
        elif item.bad is not None and item.stop:
            reason = item.bad
            out.stopped.append(gid)
            alerts.group_stopped(self, item, gid, now_ms, out)
        else:
            reason = item.bad or BadInput(
                "group-stopped", f"group {gid!r} is stopped (policy stop-group); parked"
            )
        if reason.code == lifetime.EXPIRED:
            out.expired += 1
        else:
            out.parked += 1
        out.records.append(self.dead_letter(item, reason, now_ms))

    def park_in_room(self, item: Item, gid: str | None = None) -> Record:
        """A message of a waiting or admitted group (or an ordinary one while every
        destination is busy; or a multicast copy, `gid` its queue's copies): to its group's
        room partition, in order, with its group and source position (`router.unit.steps.drain.step`
        forwards it once the group is admitted)."""
        m, r, bad = item.m, item.routing, item.bad
        gid = gid or (r.guarantee_id if r is not None else bad.guarantee_id if bad else None)
        gid = gid or room.ordinary_group(f"{m.topic()}/{m.partition()}")
        position = f"{m.topic()}/{m.partition()}/{m.offset()}".encode()
        headers = [
            *(h for h in item.headers or () if h[0] not in contract.ROOM_HEADERS),
            (contract.ROOM, gid.encode()),
            (contract.TOKEN, position),
        ]
        if bad is not None:
            final = r.final if r is not None else bad.final
            headers.append((contract.BAD, f"{bad.code}|{int(final)}|{bad.detail}".encode()))
        if self.spec.side == "send":
            headers.append((contract.ORIGIN, position))
            if item.expires_ms is not None:
                headers = lifetime.stamped(headers, item.expires_ms)
        ts_type, ts = m.timestamp()
        partition = room_partition(gid, self.room_partitions)
        return Record(
            self.room_topic, partition, m.key(), m.value(), headers, ts if ts_type else 0, None
        )

    def event(self, schema: str, key: bytes | None, record: bytes) -> Record:
        headers = [(schemas.SCHEMA_HEADER, schema.encode())]
        return Record(self.events_topic, -1, key, record, headers, 0, None)
