"""The pure steps of a unit's batch (classify, emit, holds), without a broker or Redis."""

from __future__ import annotations

from typing import Any

from router import contract
from router.config import RouterSettings
from router.contract import events, schemas
from router.table.room import UNSTAGED, WAIT
from router.table.routing import HELD, IGNORED, ORPHAN, PARKED, SKIPPED, SPANS, STOPPING
from router.topology.side import side_spec
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.drain.index import RoomIndex
from router.unit.steps.emit.emitter import Emitter
from router.unit.steps.holds import Backoff, Holds
from tests.fixtures.fakes import FakeMessage, msg

SETTINGS = RouterSettings(
    topology={"name": "t"},  # type: ignore[arg-type]
    routing={"poison_policy_by_type": {"strict": "stop-group"}, "ttl_by_type": {"strict": 60_000}},  # type: ignore[arg-type]
)


def classified(*messages: FakeMessage, side: str = "send") -> Batch:
    batch = Batch("u:1", 0)
    Classifier(SETTINGS, side, {}).classify(batch, list(messages))  # type: ignore[arg-type]
    return batch


def test_classify_keeps_positions_and_marks_bad_input_with_its_group() -> None:
    batch = classified(
        msg(5, "g1"),
        msg(6, None, extra=[(contract.FINAL, b"true")]),  # final without a group
        msg(7, "g2", extra=[(contract.MESSAGE_TYPE, b"strict"), (contract.SEQ, b"x")]),
        msg(3, "g3", partition=1),
    )
    assert batch.first == {("in", 0): 5, ("in", 1): 3}
    assert batch.last == {("in", 0): 7, ("in", 1): 3}
    good, no_group, poison, other = batch.items
    assert good.bad is None and good.routing is not None and good.routing.guarantee_id == "g1"
    assert no_group.bad is not None and no_group.bad.code == "final-without-guarantee-id"
    assert no_group.bad.guarantee_id is None and not no_group.stop
    # A bad sequence number inside a group of a stop-group type: its group is known.
    assert poison.bad is not None and poison.bad.code == "bad-seq"
    assert poison.bad.guarantee_id == "g2" and poison.stop
    assert other.routing is not None and other.routing.guarantee_id == "g3"


def test_classify_refuses_oversized_records_and_what_the_broker_refused() -> None:
    big = msg(1, "g", value=b"x" * (SETTINGS.kafka.max_message_bytes + 1))
    rejected = {("in", 0, 2): "the broker refused the record: MSG_SIZE_TOO_LARGE"}
    batch = Batch("u:1", 0)
    Classifier(SETTINGS, "send", rejected).classify(batch, [big, msg(2, "g")])
    assert [i.bad.code if i.bad else None for i in batch.items] == [
        "oversized",
        "rejected-by-broker",
    ]
    # Kept until a batch holding it commits (the unit forgets it then): a replay that
    # fails again must dead-letter it again.
    again = Batch("u:2", 1)
    Classifier(SETTINGS, "send", rejected).classify(again, [msg(2, "g")])
    assert again.items[0].bad is not None and again.items[0].bad.code == "rejected-by-broker"


def emitted(batch: Batch, decisions: list[str | None], side: str = "send") -> Any:
    for item, d in zip(batch.items, decisions, strict=True):
        item.decision = d
    spec = side_spec(SETTINGS, side)  # type: ignore[arg-type]
    return Emitter(SETTINGS, spec, "unit-1").emit(batch, now_ms=1_700_000_000_123)


def test_emit_forwards_in_order_with_origin_and_collects_finals_and_ordinary_dests() -> None:
    batch = classified(msg(10, "g", seq=0), msg(11), msg(12, "g", seq=1, final=True))
    out = emitted(batch, ["2", "0", "2"])
    assert [(r.topic, r.partition) for r in out.records] == [
        ("t.transfer", 2),
        ("t.transfer", 0),
        ("t.transfer", 2),
    ]
    origin = dict(out.records[0].headers)[contract.ORIGIN]
    assert origin == b"in/0/10"
    assert out.records[0].timestamp == 1_700_000_000_000
    assert out.finals == [("g", "in/0/12")]
    assert out.ordinary_dests == {"0"}
    assert (out.forwarded, out.grouped, out.dead, out.parked) == (3, 2, 0, 0)


def test_emit_dead_letters_parks_and_raises_group_stopped() -> None:
    batch = classified(
        msg(1, None, extra=[(contract.FINAL, b"true")]),  # bad, no group: dead letter
        msg(2, "s", extra=[(contract.MESSAGE_TYPE, b"strict"), (contract.SEQ, b"x")]),  # stops s
        msg(3, "s", seq=2),  # parked behind it
        msg(4, "o", seq=5),  # orphan
    )
    out = emitted(batch, [None, PARKED, PARKED, ORPHAN])
    topics = [r.topic for r in out.records]
    assert topics == ["t.dlq", "t.events", "t.dlq", "t.dlq", "t.dlq"]
    reasons = [dict(r.headers).get("reason") for r in out.records]
    assert reasons == [
        b"final-without-guarantee-id",
        None,
        b"bad-seq",
        b"group-stopped",
        b"group-entry-missing",
    ]
    stopped = schemas.decode(events.GROUP_STOPPED, out.records[1].value)
    assert stopped["guarantee_id"] == "s" and stopped["source_offset"] == 2
    letter = schemas.decode(events.DEAD_LETTER, out.records[4].value)
    assert (letter["source_topic"], letter["source_offset"]) == ("in", 4)
    assert (out.forwarded, out.dead, out.parked, out.groups_stopped, out.orphans_parked) == (
        0,
        1,
        3,
        1,
        1,
    )
    assert out.stopped == ["s"], "settle frees the stopped group's destination (defect 6)"


def test_emit_ends_a_group_whose_final_is_dead_lettered_and_refuses_a_second_lane() -> None:
    """Defects 6 and 8: a dead-lettered final still ends its group (settle releases it);
    a message whose group lives on another lane is dead-lettered with its reason."""
    too_big = b"x" * (SETTINGS.kafka.max_message_bytes + 1)
    batch = classified(
        msg(1, "g", seq=0),
        msg(2, "g", seq=1, final=True, value=too_big),
        msg(3, "h", seq=4, partition=1),
    )
    out = emitted(batch, ["1", "1", SPANS])
    reasons = [dict(r.headers).get("reason") for r in out.records]
    assert reasons == [None, b"oversized", None, b"group-spans-partitions"]
    assert out.finals == [("g", "in/0/2")]
    # The receive side never gets g's final: a close marker follows g on its partition.
    marker = out.records[2]
    assert (marker.topic, marker.partition, marker.value) == ("t.transfer", 1, None)
    headers = dict(marker.headers)
    assert headers[contract.CONTROL] == contract.CLOSE and headers[contract.FINAL] == b"true"
    assert headers[contract.GUARANTEE_ID] == b"g" and out.close_markers == 1
    letter = schemas.decode(events.DEAD_LETTER, out.records[3].value)
    assert letter["reason_code"] == "group-spans-partitions" and letter["source_partition"] == 1


def test_a_stopped_group_is_closed_downstream_and_a_close_marker_releases_it() -> None:
    """Defect 6, receive side: the message that stops a group on the send side (decision
    STOPPING + its destination) sends a close marker there; the receive side turns a
    close marker into a release of its group (a final) and forwards nothing of it."""
    batch = classified(
        msg(2, "s", extra=[(contract.MESSAGE_TYPE, b"strict"), (contract.SEQ, b"x")]),
    )
    out = emitted(batch, [STOPPING + "3"])
    assert [r.topic for r in out.records] == ["t.events", "t.dlq", "t.transfer"]
    marker = out.records[2]
    assert marker.partition == 3 and dict(marker.headers)[contract.CONTROL] == contract.CLOSE
    assert out.stopped == ["s"] and out.parked == 1

    # What the receive unit reads: the marker closes s; one for an unknown group is ignored.
    received = [msg(7, headers=marker.headers), msg(8, headers=marker.headers)]
    batch = classified(*received, side="receive")
    assert [i.close for i in batch.items] == [True, True]
    out = emitted(batch, ["q1", IGNORED], side="receive")
    assert out.records == [] and out.finals == [("s", "in/0/7")]
    assert out.closes == 2 and out.consumed == 2 and out.forwarded == 0


def test_a_send_queue_message_may_not_pose_as_a_close_marker() -> None:
    batch = classified(msg(1, "g", extra=[(contract.CONTROL, contract.CLOSE)]))
    (item,) = batch.items
    assert not item.close and item.bad is not None and item.bad.code == "bad-headers"
    assert item.bad.guarantee_id == "g"


def test_emit_skips_what_a_hold_keeps_back_and_the_offsets_resume_there() -> None:
    batch = classified(msg(1, "a"), msg(2, "b"), msg(3, "a"), msg(7, "c", partition=1))
    batch.held_at[("in", 0)] = 2
    out = emitted(batch, ["1", HELD, SKIPPED, "0"])
    assert [(r.partition, r.headers[-1][1]) for r in out.records] == [
        (1, b"in/0/1"),
        (0, b"in/1/7"),
    ]
    assert [(tp.partition, tp.offset) for tp in batch.resume_offsets()] == [(0, 2), (1, 8)]
    batch.held_at[("in", 0)] = 1
    assert [(tp.partition, tp.offset) for tp in batch.resume_offsets()] == [(1, 8)]


def test_emit_announces_a_table_reset_first() -> None:
    batch = classified(msg(1))
    batch.table_reset = ("100-a", "200-b")
    out = emitted(batch, ["t.recv.1"], side="receive")
    assert out.records[0].topic == "t.events"
    reset = schemas.decode(events.TABLE_RESET, out.records[0].value)
    assert (reset["previous_epoch"], reset["epoch"], reset["side"]) == ("100-a", "200-b", "RECEIVE")
    assert out.records[1].topic == "t.recv.1"


def test_holds_retry_keep_their_first_time_and_time_out() -> None:
    holds = Holds(retry_s=0.1, timeout_s=10.0)
    batch = Batch("u:1", 0, first={("in", 0): 4}, last={("in", 0): 9}, held_at={("in", 0): 5})
    assert holds.settle(batch, now=1.0) == [(("in", 0), 5)]
    assert holds.waiting() == {("in", 0)} and holds.due(1.05) == []
    assert holds.due(1.2) == [("in", 0)] and holds.waiting() == set()
    holds.settle(batch, now=1.3)  # held again at the same offset: keeps its first time
    assert not holds.timed_out(("in", 0), 5, now=10.9)
    assert holds.timed_out(("in", 0), 5, now=11.0)
    assert not holds.timed_out(("in", 0), 6, now=11.0)
    through = Batch("u:2", 0, first={("in", 0): 5}, last={("in", 0): 9})
    assert holds.settle(through, now=12.0) == [] and not holds


def test_backoff_doubles_up_to_its_maximum() -> None:
    b = Backoff(200, 1000)
    assert b.until is None
    assert [b.start() for _ in range(4)] == [200, 400, 800, 1000]
    assert b.until is not None


def _as_read(records: list[Any], first_offset: int = 0) -> list[FakeMessage]:
    """The room records as the drain step reads them back."""
    return [
        FakeMessage(r.topic, r.partition, first_offset + i, r.value, r.key, list(r.headers))
        for i, r in enumerate(records)
    ]


def test_in_the_room_a_bad_message_is_parked_in_its_place_with_its_reason() -> None:
    """A bad message of a waiting group is not dead-lettered ahead of the group's parked
    ones: it is parked with its reason, and the drain dead-letters it in its place (a bad
    final still ends the group). Room headers a sender set are dropped."""
    forged = [(contract.ROOM, b"other"), (contract.BAD, b"fake|1|not bad")]
    batch = classified(
        msg(1, "b", seq=0, extra=forged),
        msg(2, "b", seq=1, final=True, extra=[(contract.TTL_MS, b"soon")]),
    )
    out = emitted(batch, [WAIT, WAIT])
    assert {r.topic for r in out.records} == {"t.room.send"} and out.parked_in_room == 2
    assert out.finals == [] and out.dead == 0  # both decided when the group drains
    index = RoomIndex()
    for m in _as_read(out.records):
        index.add(m)
    ((_, by_gid),) = index.groups.items()
    good, bad = by_gid["b"]
    assert good.bad is None and not good.final
    assert bad.bad is not None and (bad.bad.code, bad.final) == ("bad-ttl", True)
    assert bad.source() == ("in", 0, 2)


def test_in_the_room_a_close_marker_follows_its_group_and_is_read_back_as_a_close() -> None:
    marker = [
        (contract.GUARANTEE_ID, b"s"),
        (contract.FINAL, b"true"),
        (contract.CONTROL, contract.CLOSE),
    ]
    batch = classified(msg(7, headers=marker), side="receive")
    out = emitted(batch, [WAIT], side="receive")
    assert [r.topic for r in out.records] == ["t.room.receive"] and out.closes == 0
    index = RoomIndex()
    (m,) = _as_read(out.records)
    index.add(m)
    ((_, by_gid),) = index.groups.items()
    (close,) = by_gid["s"]
    assert close.close and close.final and close.token == "in/0/7"


def test_a_staged_group_over_the_bound_is_parked_and_announced_once() -> None:
    batch = classified(msg(4, "w", seq=3, extra=[(contract.DELIVERY, b"complete")]))
    out = emitted(batch, [UNSTAGED])
    assert [r.topic for r in out.records] == ["t.room.send", "t.events"]
    event = schemas.decode(events.GROUP_STAGING_ABORTED, out.records[1].value)
    assert (event["guarantee_id"], event["staged_messages"], event["source_offset"]) == (
        "w",
        SETTINGS.routing.max_staged_messages,
        4,
    )
    assert out.staging_aborted == 1 and out.parked_in_room == 1
