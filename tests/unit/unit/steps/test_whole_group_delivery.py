"""Adversarial review of whole-group delivery (`guarantee-delivery: complete`) and of the
drain waiting for a group's final, on pure logic only: the table model, the classify and
emit steps, the room index and the drain step driven by the model (no Kafka, no Redis).

The defects found (docstrings marked DEFECT) are fixed, and their tests pass now; the other
tests document a property the review checked and that held."""

from __future__ import annotations

from typing import Any

from router import contract
from router.config import RouterSettings
from router.table import room, waits
from router.table.model import TableModel
from router.table.routing import NO_DEST, STOPPING, RouteRequest
from tests.fixtures.fakes import msg
from tests.fixtures.roomharness import LEASE_MS, WHOLE, Side, whole

SETTINGS = RouterSettings(
    topology={"name": "t"},  # type: ignore[arg-type]
    routing={  # type: ignore[arg-type]
        "busy_policy": "wait",
        "poison_policy_by_type": {"strict": "stop-group"},
        "ttl_by_type": {"strict": 60_000},
    },
)


def req(gid: str, final: bool = False, lane: str = "q/0", **kw: Any) -> RouteRequest:
    return RouteRequest(gid, final, 60_000, f"{lane}/{gid}/{final}", lane, **kw)


# --- defects ---


def test_a_whole_group_whose_final_park_was_aborted_waits_for_its_replay_whole() -> None:
    """DEFECT, now fixed (was: the drain waits for the final, drain.py). W is staged (W0, W1
    committed to the room); the batch that routes W's final marks the entry closing and
    makes W wait, but the unit dies before its commit: the final's room record is aborted.
    Its park lease ends after lease_ms (15 s; the lane's rebalance takes longer: the
    session timeout), a route call admits W to the free destination. The drain now holds
    W0, W1 back ("closing and not parked[-1].final"), yet its switch check still runs for
    W: no park lease in flight, position at the end offset, parks equal -> W is switched
    to OPEN with nothing forwarded. The next drain finds W open with records left and
    dead-letters W0 and W1 as `room-late`; the replayed final then goes to the destination
    alone. A good whole group is split: two members in the dead-letter topic, one
    delivered (before this change the drain forwarded W0, W1 on admission, so an admitted
    group with an aborted final was not hurt). The same now happens to any admitted
    group (streamed too) whose final's park was aborted."""
    s = Side(["0"])
    assert s.route(0, whole(0, "W", 0), whole(1, "W", 1)) == [room.WAIT, room.WAIT]
    assert s.model.entries["W"].state == room.STAGED
    # The final: routed (closing set, W waits), but its batch never commits.
    assert s.route(100, whole(2, "W", 2, final=True), commit=False) == [room.WAIT]
    assert s.model.entries["W"].state == room.WAITING and s.model.entries["W"].closing
    # The park lease runs out; any route call of any unit admits W.
    later = 100 + LEASE_MS + 1
    s.model.route([], later, batch="other")
    assert s.model.entries["W"].state == room.ADMITTED
    for k in range(3):  # the drain keeps running meanwhile
        s.run_drain(later + 10 * k)
    # The lane's new owner replays the final.
    s.route(later + 40_000, whole(2, "W", 2, final=True))
    for k in range(3):
        s.run_drain(later + 40_010 + k)
    assert s.dead == [], f"good members of a whole group dead-lettered: {s.dead}"
    assert [v for _, v in s.delivered] == [b"W0", b"W1", b"W2"]


def test_a_bad_first_message_keeps_its_group_whole() -> None:
    """DEFECT, now fixed (was: route.py request_for: `complete = r is not None and ...`).
    A whole group's first message with a malformed routing header (here a TTL out of
    bounds, under the default poison policy dead-letter) is dead-lettered but routed for
    its group; contract.parse keeps its group, final flag, seq, type and poison policy in
    the BadInput, but not its delivery. So the group is created as a *streamed* one: it
    takes the free destination at once, and its good members W1, W2, all asking for
    complete delivery, are forwarded one by one as they arrive, never staged nor written
    in one transaction. Whole-group delivery is dropped silently (nothing says so)."""
    s = Side(["0"])
    bad_first = whole(0, "W", 0, extra=[(contract.TTL_MS, b"1")])
    decisions = s.route(0, bad_first, whole(1, "W", 1))
    assert decisions == [room.WAIT, room.WAIT], (
        f"the whole group is not staged: {decisions}, entry {s.model.entries['W']}"
    )
    assert s.model.entries["W"].state == room.STAGED
    # Fixed: the BadInput keeps the delivery; the bad member waits in the room in its
    # place and is dead-lettered, with its reason, when the group drains.
    assert not s.dead


def test_a_whole_group_held_past_the_hold_timeout_is_staged_not_shared() -> None:
    """DEFECT, now fixed (was: model.py, route.lua: `not r.force_share` / `not has(flags,
    's')`). W's ID is reused on lane q/0 while its old group is open from lane q/1: the
    first message is held (rule 1). Past hold_timeout_ms it is retried with force share;
    the old group has ended meanwhile, but G now holds the only destination. A streamed
    group would be shared there (documented), but a whole group needs no destination to
    be staged: it is shared anyway, streamed into G's destination (interleaved), and
    whole-group delivery (contiguous, one write) is lost although staging was possible."""
    t = TableModel(["0"], policy="wait")
    assert t.route([req("W", lane="q/1")], 0, batch="b1").decisions == ["0"]
    t.settle("b1", [], [])
    assert t.route([req("W", lane="q/0", complete=True)], 1, batch="b2").decisions == ["!h"]
    t.settle("b2", [], [])
    t.route([req("W", final=True, lane="q/1")], 2, batch="b3")
    t.settle("b3", [], [("W", "q/1/W/True")])
    assert t.route([req("G", lane="q/2")], 3, batch="b4").decisions == ["0"]
    t.settle("b4", [], [])
    # The held first message, past the hold timeout: force share.
    r = t.route([req("W", lane="q/0", complete=True, force_share=True)], 20_000, batch="b5")
    assert r.decisions == [room.WAIT], (
        f"shared onto G's destination: {r.decisions}, shared={r.shared}"
    )


# --- properties that held ---


def test_a_staged_group_with_a_bad_final_is_dead_lettered_in_place_and_frees_everything() -> None:
    """Held: a whole group whose final is bad (payload too large) is completed by it,
    admitted, and the drain writes the members in one batch and dead-letters the final in
    its place; its release frees the destination and a close marker follows downstream."""
    s = Side(["0"])
    big = b"x" * (SETTINGS.kafka.max_message_bytes + 1)
    s.route(0, whole(0, "W", 0), whole(1, "W", 1))
    s.route(10, msg(2, "W", seq=2, final=True, value=big, extra=WHOLE))
    out = s.run_drain(20)
    assert [v for _, v in s.delivered] == [b"W0", b"W1"]
    assert [r for _, r in s.dead] == [b"oversized"] and out.close_markers == 1
    assert s.model.entries == {} and s.model.load == {} and s.model.room == {}


def test_a_staged_group_whose_final_comes_in_the_batch_of_its_first_is_delivered_whole() -> None:
    """Held: first and final in one batch; while it waited, an ordinary message and a
    streamed group went through; once admitted it is written in one drain batch."""
    s = Side(["0"])
    assert s.route(0, msg(0, "S", seq=0)) == ["0"]
    d = s.route(5, whole(1, "W", 0), whole(2, "W", 1, final=True), msg(3, "S", seq=1, final=True))
    assert d == [room.WAIT, room.WAIT, "0"]
    # complete by its final: it waited (FIFO), and S's release at the settle admitted it
    assert s.model.entries["W"].state == room.ADMITTED and s.model.room == {}
    s.run_drain(6)
    assert [v for _, v in s.delivered] == [b"payload", b"payload", b"W0", b"W1"]
    assert s.model.entries == {} and s.model.load == {}


def test_a_staged_group_stopped_by_poison_leaves_the_room_and_its_members_are_dead_lettered() -> (
    None
):
    """Held: a stop-group poison message of a staged group stops it (no destination to
    free, no close marker: nothing was forwarded); its parked members are dead-lettered
    (`group-stopped`) by the drain, in order, and later ones too; nothing is delivered."""
    s = Side(["0"])
    strict = [(contract.MESSAGE_TYPE, b"strict")]
    s.route(0, whole(0, "W", 0, extra=strict), whole(1, "W", 1, extra=strict))
    poison = msg(2, "W", extra=[*WHOLE, *strict, (contract.SEQ, b"x")])
    d = s.route(5, poison, whole(3, "W", 3, final=True, extra=strict))
    assert d == [STOPPING + NO_DEST, "!p"]
    s.run_drain(6)
    assert s.delivered == []
    assert [r for _, r in s.dead] == [
        b"bad-seq",
        b"group-stopped",
        b"group-stopped",
        b"group-stopped",
    ]
    assert s.model.load == {} and s.model.room == {}


def test_a_staged_group_is_swept_at_its_ttl_and_never_in_the_fifo() -> None:
    """Held: a staged group whose final never comes holds no destination, is never timed
    out as waiting (not in the FIFO), and is swept at its TTL; its parked members are then
    dead-lettered (`group-entry-missing`)."""
    s = Side(["0"])
    s.route(0, whole(0, "W", 0))
    assert waits.time_out(s.model, 10**9, 0, "share") == []
    assert [w.guarantee_id for w in s.model.sweep(60_000 * 10)] == ["W"]
    s.run_drain(60_000 * 10)
    assert [r for _, r in s.dead] == [b"group-entry-missing"]
