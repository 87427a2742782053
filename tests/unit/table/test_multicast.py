"""Point-to-point and multicast (`router.table.multicast`, `router.unit.steps.emit.fanout`): the
headers, the table's rule on the pure model, the emit step's copies and what the Sender checks. No
broker, no Redis (the Lua script is checked against the model by
tests/integration/table/test_table_properties.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ops.harness.verdict.records import Seen, Sent
from ops.harness.verdict.sides import CapacitySpec
from ops.harness.verdict.verify import verify
from router import contract
from router.config import RouterSettings
from router.contract import BadInput, Routing, multicast
from router.contract.request import request
from router.table import multicast as table_multicast
from router.table import room, waits
from router.table.model import TableModel
from router.table.routing import HELD, RouteRequest
from router.topology.side import side_spec
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.drain.index import RoomIndex
from router.unit.steps.emit.emitter import Emitter
from tests.fixtures.fakes import FakeMessage, msg

QUEUES = ("t.recv.1", "t.recv.2", "t.recv.3")
SETTINGS = RouterSettings(topology={"name": "t"})  # type: ignore[arg-type]
MC = (multicast.DELIVERY, b"multicast")


def read(*headers: tuple[str, bytes | None], gid: str | None = None) -> tuple[str, ...] | None:
    return multicast.read(list(headers), QUEUES, Routing(gid, False, 1))


# ------------------------------------------------------------------ the headers


def test_point_to_point_is_the_default_and_multicast_reaches_every_queue() -> None:
    assert read() is None
    assert read(("x-trace", b"1")) is None
    assert read((multicast.DELIVERY, b"point-to-point")) is None
    assert read((multicast.DELIVERY, b"point-to-point"), gid="g") is None
    assert read(MC) == QUEUES


def test_a_named_subset_keeps_the_topologys_order_and_ignores_spaces() -> None:
    assert read(MC, (multicast.QUEUES, b"t.recv.3, t.recv.1")) == ("t.recv.1", "t.recv.3")
    assert read(MC, (multicast.QUEUES, b"t.recv.2")) == ("t.recv.2",)


@pytest.mark.parametrize(
    ("headers", "gid", "code", "detail"),
    [
        ([(multicast.DELIVERY, b"broadcast")], None, "bad-multicast", "is not one of"),
        ([(multicast.DELIVERY, b"")], None, "bad-multicast", "is not one of"),
        ([MC, MC], None, "bad-multicast", "more than once"),
        ([(multicast.QUEUES, b"t.recv.1")], None, "bad-multicast", "needs message-delivery"),
        ([MC, (multicast.QUEUES, b"")], None, "bad-multicast", "empty name"),
        ([MC, (multicast.QUEUES, b"t.recv.1,,t.recv.2")], None, "bad-multicast", "empty name"),
        ([MC, (multicast.QUEUES, b"t.recv.1,t.recv.1")], None, "bad-multicast", "twice"),
        ([MC, (multicast.QUEUES, b"\xff")], None, "bad-multicast", "UTF-8"),
        ([MC, (multicast.QUEUES, b"x" * 70_000)], None, "bad-multicast", "more than 65536"),
        ([MC, (multicast.QUEUES, b"t.recv.1,t.recv.9")], None, "unknown-queue", "'t.recv.9'"),
        ([MC], "g", "multicast-in-group", "group 'g' cannot be multicast"),
    ],
)
def test_bad_multicast_headers_are_bad_input_with_a_reason(
    headers: list[tuple[str, bytes]], gid: str | None, code: str, detail: str
) -> None:
    with pytest.raises(BadInput) as caught:
        read(*headers, gid=gid)
    assert caught.value.code == code and detail in caught.value.detail, caught.value
    assert caught.value.guarantee_id == gid  # a group's member: its poison policy applies


def test_an_unknown_queue_is_named_with_the_topologys_queues() -> None:
    with pytest.raises(BadInput) as caught:
        read(MC, (multicast.QUEUES, b"orders"))
    assert caught.value.detail == (
        "multicast-queues names 1 queue(s) that are not receive queues of the topology: "
        "'orders' (it has 3: t.recv.1, t.recv.2, t.recv.3)"
    )


def test_the_classify_step_reads_the_targets_on_both_sides_and_marks_bad_ones() -> None:
    for side in ("send", "receive"):
        batch = Batch("u:1", 0)
        Classifier(SETTINGS, side, {}).classify(  # type: ignore[arg-type]
            batch,
            [
                msg(1, extra=[MC]),
                msg(2, extra=[MC, (multicast.QUEUES, b"t.recv.2")]),
                msg(3),
                msg(4, extra=[MC, (multicast.QUEUES, b"nowhere")]),
                msg(5, "g", seq=0, extra=[MC]),
            ],
        )
        every, one, plain, unknown, grouped = batch.items
        assert every.targets == QUEUES and every.bad is None
        assert one.targets == ("t.recv.2",) and plain.targets is None
        assert unknown.bad is not None and unknown.bad.code == "unknown-queue"
        assert grouped.bad is not None and grouped.bad.code == "multicast-in-group"
        assert grouped.bad.guarantee_id == "g" and grouped.targets is None


# ------------------------------------------------------------------ the table's rule


def req(gid: str | None, final: bool = False, lane: str = "x/0") -> RouteRequest:
    return RouteRequest(gid, final, 60_000, f"{lane}/{gid}/{final}", lane)


def mc(*targets: str, lane: str = "x/0") -> RouteRequest:
    return RouteRequest(None, False, 60_000, "", lane, targets=targets)


@pytest.mark.parametrize("policy", ["share", "hold", "wait"])
def test_copies_go_straight_where_no_group_is_open_and_wait_for_the_others(policy: str) -> None:
    t = TableModel(["a", "b", "c"], policy=policy)  # type: ignore[arg-type]
    assert t.route([req("g")], 0, batch="b1").decisions == ["a"]
    result = t.route([mc("a", "b", "c")], 1, batch="b2")
    # Whatever the policy: never shared, never held; b and c are leased like an
    # ordinary message's destination, a's copy waits for a alone.
    assert result.decisions == [table_multicast.decision(["b", "c"], ["a"])]
    assert (result.shared, result.held) == (0, 0)
    assert set(t.inflight) == {("b", "b2"), ("c", "b2")}
    assert t.room == {"~*a": 1} and t.entries["~*a"].state == room.WAITING
    # A later copy for a parks behind it, even once a is freed in its batch: one
    # queue's copies keep their order.
    later = t.route([req("g", final=True), mc("a")], 2, batch="b3")
    assert later.decisions == ["a", table_multicast.decision([], ["a"])]
    assert t.entries["~*a"].parks == 2
    t.settle("b2", ["b", "c"], [])
    t.settle("b3", [], [("g", "x/0/g/True")])
    # g's release admits a's copies to a, and only to a; a stays reserved until drained.
    assert t.entries["~*a"].state == room.ADMITTED and t.entries["~*a"].dest == "a"
    assert t.route([req("h")], 3, batch="b4").decisions[0] != "a"
    t.settle("d1", [], [], drains=[("~*a", 2)])
    assert "~*a" not in t.entries and t.load.get("a", 0) == 0


def test_a_group_closed_earlier_in_the_batch_does_not_stop_a_copy() -> None:
    t = TableModel(["a", "b"])
    t.route([req("g")], 0, batch="b1")
    t.settle("b1", [], [])
    # One transaction: the copy is appended after g's final.
    decisions = t.route([req("g", final=True), mc("a", "b")], 1, batch="b2").decisions
    assert decisions == ["a", table_multicast.decision(["a", "b"], [])]


def test_a_copy_in_flight_fences_its_queue_for_other_batches_new_groups() -> None:
    t = TableModel(["a", "b"], policy="wait")
    t.route([mc("a")], 0, batch="b1")
    assert t.route([req("g")], 1, batch="b2").decisions == ["b"]  # not a: b1 not settled
    assert t.route([req("h")], 2, batch="b3").decisions == [room.WAIT]  # a is not clean


def test_waiting_copies_do_not_make_new_groups_queue_and_never_time_out() -> None:
    t = TableModel(["a", "b"], policy="wait")
    t.route([req("g")], 0, batch="b1")
    t.route([mc("a")], 1, batch="b2")
    t.settle("b1", [], [])
    t.settle("b2", [], [])
    assert t.room == {"~*a": 1}
    # b is clean: a new group goes there at once instead of queueing behind the copy
    assert t.route([req("h")], 2, batch="b3").decisions == ["b"]
    assert waits.time_out(t, 100_000, 10, "share") == []  # copies wait for their queue
    assert t.room == {"~*a": 1}


def test_copies_are_admitted_in_their_turn_and_do_not_block_younger_groups() -> None:
    t = TableModel(["a", "b"], policy="wait")
    t.route([req("g1"), req("g2")], 0, batch="b1")  # a and b
    t.route([mc("a")], 1, batch="b2")  # waits for a
    t.route([req("g3")], 2, batch="b3")  # waits for any
    for b in ("b1", "b2", "b3"):
        t.settle(b, [], [])
    # b frees first: g3 is admitted there, although the older copy waits (for a only)
    t.route([req("g2", final=True)], 3, batch="b4")
    t.settle("b4", [], [("g2", "x/0/g2/True")])
    assert t.entries["g3"].state == room.ADMITTED and t.entries["g3"].dest == "b"
    assert t.entries["~*a"].state == room.WAITING
    # a frees while a ordinary batch has it leased: the copy goes in anyway (a copy
    # cannot interleave with ordinary messages), a waiting group would not
    t.route([req("g1", final=True)], 4, batch="b5")
    t.inflight[("a", "other")] = 10**9
    t.settle("b5", [], [("g1", "x/0/g1/True")])
    assert t.entries["~*a"].state == room.ADMITTED and t.entries["~*a"].dest == "a"


def test_a_copy_ignores_draining_and_a_held_lane_skips_it() -> None:
    t = TableModel(["a", "b"], policy="hold")
    t.draining.add("a")
    assert t.route([mc("a")], 0, batch="b1").decisions == [table_multicast.decision(["a"], [])]
    # groups are not placed on draining a: g1 takes b, g2 is held (policy hold)
    assert t.route([req("g1"), req("g2", lane="y/0")], 1, batch="b2").decisions == ["b", HELD]
    decisions = t.route([req("g3"), mc("b")], 2, batch="b3").decisions
    assert decisions == [HELD, "!s"]  # behind a held message of its lane: replayed later


# ------------------------------------------------------------------ random histories

GROUPS = [f"g{i}" for i in range(5)]
DESTS = ["d0", "d1", "d2"]
step = st.one_of(
    st.tuples(st.just("msg"), st.sampled_from([*GROUPS, None]), st.none()),
    st.tuples(st.just("end"), st.sampled_from(GROUPS), st.none()),
    st.tuples(st.just("mc"), st.none(), st.frozensets(st.sampled_from(DESTS), min_size=1)),
    st.tuples(st.just("settle"), st.none(), st.none()),
    st.tuples(st.just("drain"), st.none(), st.none()),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(step, max_size=60), st.sampled_from(["share", "wait"]))
def test_a_copy_never_lands_inside_an_open_groups_span_and_every_copy_arrives_once(
    history: list[tuple[str, str | None, frozenset[str] | None]], policy: str
) -> None:
    """One unit, batches committed in the order they are routed: what each destination
    holds, in order, follows from the decisions (a parked record lands when its group is
    drained). Whatever the history, no copy is appended while a group is open on its
    destination (under `share`: unless a group was shared, placed while every destination
    was busy, and a copy waited or was in flight on that one), and once every group ended
    and everything drained, every copy is on its destination exactly once."""
    t = TableModel(DESTS, policy=policy)  # type: ignore[arg-type]
    logs: dict[str, list[tuple[str, str]]] = {d: [] for d in DESTS}  # (kind, name)
    parked: dict[str, list[tuple[str, str]]] = {}  # room group -> its parked records
    pending: list[tuple[str, list[tuple[str, str]]]] = []  # unsettled: (batch, finals)
    expected: list[tuple[str, str]] = []  # (copy name, destination)
    ended: set[str] = set()
    shared = 0
    now = 0

    def land(dest: str, kind: str, name: str) -> None:
        logs[dest].append((kind, name))

    def route(r: RouteRequest, name: str) -> None:
        nonlocal now, shared
        now += 1
        batch = f"b{now}"
        result = t.route([r], now, batch=batch)
        (d,) = result.decisions
        shared += result.shared
        finals = []
        if r.targets:
            straight, waits = table_multicast.split(d)
            for dest in straight:
                land(dest, "copy", name)
            for dest in waits:
                parked.setdefault(room.copy_group(dest), []).append(("copy", name))
        elif d == room.WAIT:
            gid = r.guarantee_id or room.ordinary_group(r.lane)
            parked.setdefault(gid, []).append(("group" if r.guarantee_id else "ord", name))
        else:
            assert not d.startswith("!"), d
            land(d, "group" if r.guarantee_id else "ord", name)
            if r.final and r.guarantee_id:
                finals.append((r.guarantee_id, r.token))
        pending.append((batch, finals))

    def drain_all() -> None:
        nonlocal now
        now += 1
        admitted = [(g, e) for g, e in t.entries.items() if e.state == room.ADMITTED]
        drains, finals = [], []
        for g, e in admitted:
            for record in parked.pop(g, []):
                land(e.dest, *record)
            drains.append((g, e.parks))
            if e.closing and not room.is_pseudo(g):
                finals.append((g, e.closing))
        t.settle(f"drain{now}", [], finals, drains=drains)

    def settle_one() -> None:
        batch, finals = pending.pop(0)
        t.settle(batch, [d for (d, b) in t.inflight if b == batch], finals)

    for kind, gid, targets in history:
        if kind == "msg" and (gid is None or gid not in ended):
            route(req(gid), f"{gid}-{now}")
        elif kind == "end" and gid is not None and gid not in ended:
            ended.add(gid)
            route(req(gid, final=True), f"{gid}-end")
        elif kind == "mc" and targets is not None:
            name = f"m{now}"
            expected.extend((f"{name}", d) for d in targets)
            route(mc(*sorted(targets)), name)
        elif kind == "settle" and pending:
            settle_one()
        elif kind == "drain":
            drain_all()
    for g in GROUPS:  # every group ends; everything settles and drains
        if g not in ended:
            ended.add(g)
            route(req(g, final=True), f"{g}-end")
    for _ in range(len(GROUPS) + len(DESTS) + 3):
        while pending:
            settle_one()
        drain_all()
    assert t.room == {} and not parked, (t.room, parked)
    for dest, log in logs.items():
        # by this simulation's one lane, a group's records are contiguous or shared:
        # track which groups are open at each record
        opened: set[str] = set()
        for kind, name in log:
            gid = name.split("-")[0]
            if kind == "copy" and not shared:
                assert not opened, f"copy {name} inside {opened}'s span on {dest}: {log}"
            elif kind == "group":
                if name.endswith("-end"):
                    opened.discard(gid)
                else:
                    opened.add(gid)
    got = sorted((name, d) for d, log in logs.items() for kind, name in log if kind == "copy")
    assert got == sorted(expected)


# ------------------------------------------------------------------ the copies


def emitted(items: list[tuple[FakeMessage, str]]) -> Any:
    batch = Batch("u:1", 0)
    Classifier(SETTINGS, "receive", {}).classify(batch, [m for m, _ in items])
    for item, (_, d) in zip(batch.items, items, strict=True):
        item.decision = d
    spec = side_spec(SETTINGS, "receive")
    return Emitter(SETTINGS, spec, "unit-1").emit(batch, now_ms=1_700_000_000_123)


def test_the_copies_carry_the_message_as_it_came_straight_or_parked_for_their_queue() -> None:
    headers = [(contract.ORIGIN, b"t.send.1/0/7"), MC, ("x-trace", b"42")]
    m = FakeMessage("t.transfer", 0, 7, b"news", b"k", headers)
    out = emitted(
        [
            (m, table_multicast.decision(["t.recv.1", "t.recv.3"], ["t.recv.2"])),
            (msg(8), "t.recv.2"),
        ]
    )
    straight = [r for r in out.records if r.topic.startswith("t.recv")]
    assert [(r.topic, r.partition, r.key, r.value) for r in straight] == [
        ("t.recv.1", 0, b"k", b"news"),
        ("t.recv.3", 0, b"k", b"news"),
        ("t.recv.2", 0, None, b"payload"),  # the ordinary message after it
    ]
    assert straight[0].headers == headers and straight[0].timestamp == 1_700_000_000_000
    (parked,) = [r for r in out.records if r.topic == "t.room.receive"]
    assert out.ordinary_dests == {"t.recv.1", "t.recv.3", "t.recv.2"}
    assert (out.forwarded, out.parked_in_room, out.multicast, out.multicast_copies) == (3, 1, 1, 3)
    assert out.consumed == 2  # two messages taken, four records written
    # Read back by the drain step: in its queue's copies group, with the original headers.
    index = RoomIndex()
    index.add(
        FakeMessage(
            parked.topic, parked.partition, 0, parked.value, parked.key, list(parked.headers)
        )
    )
    ((_, by_gid),) = index.groups.items()
    (copy,) = by_gid[room.copy_group("t.recv.2")]
    assert copy.headers() == headers[1:] and copy.token == "t.transfer/0/7"


# ------------------------------------------------------------------ the sender


def test_the_sender_passes_multicast_headers_on_and_refuses_what_the_router_would() -> None:
    r = request(multicast.headers(["t.recv.2"]), **NO_ARGS)
    assert r.others == [(multicast.DELIVERY, b"multicast"), (multicast.QUEUES, b"t.recv.2")]
    assert request([("message-delivery", "multicast")], **NO_ARGS).others  # str values too
    with pytest.raises(ValueError, match="cannot be multicast"):
        request(multicast.headers(), **{**NO_ARGS, "guarantee_id": "g"})
    with pytest.raises(ValueError, match="is not one of"):
        request([(multicast.DELIVERY, b"all")], **NO_ARGS)
    with pytest.raises(ValueError, match="needs message-delivery"):
        request([(multicast.QUEUES, b"q")], **NO_ARGS)
    with pytest.raises(ValueError, match="must be non-empty"):
        multicast.headers([])


NO_ARGS: dict[str, Any] = dict(
    guarantee_id=None, final=False, message_type=None, ttl_ms=None, delivery=None
)


# ------------------------------------------------------------------ the judge


def at(queue: str, offset: int, s: Sent, app: int, created: int = 0) -> Seen:
    return Seen(queue, offset, s.event_id, s.group, s.seq, s.final, None, app, created)


def test_the_verdict_expects_a_multicast_message_once_on_each_of_its_queues() -> None:
    m, o = Sent("m", None, 0, False, ("q1", "q2")), Sent("o", None, 0, False)
    g0, g1 = Sent("g0", "g", 0, False), Sent("g1", "g", 1, True)
    got = [at("q1", 0, g0, 1), at("q1", 1, g1, 2), at("q1", 2, m, 3), at("q2", 0, m, 3)]
    r = verify([g0, g1, m, o], [*got, at("q2", 1, o, 4)])
    assert (r.sent, r.received, r.multicast_sent, r.ordinary_sent) == (5, 5, 1, 2)
    assert r.violations() == [] and r.interleaved == 0  # after g's final: no interleaving
    # a copy missing on q2, another twice on q1, one on q3 that it did not name
    r = verify([g0, g1, m], [*got[:3], at("q1", 3, m, 4), at("q3", 0, m, 4)])
    assert (r.lost, r.duplicated, r.unexpected) == (1, 1, 1) and r.lost_examples == ["m@q2"]


def test_a_copy_inside_a_span_is_allowed_only_while_every_other_queue_was_busy() -> None:
    """m is copied to q1 and q2 (appended upstream at 5, on both queues at 10). Group h
    was placed on q2 at 8, while q1 had m's copy in flight (the table's lease keeps new
    groups off it): under `share` the table found no clean queue, so m's copy on q2,
    inside h's span, is allowed. An ordinary message there is not: the table places
    ordinary messages on a queue with a copy in flight."""
    m, o = Sent("m", None, 0, False, ("q1", "q2")), Sent("o", None, 0, False)
    h0, h1 = Sent("h0", "h", 0, False), Sent("h1", "h", 1, True)
    upstream = [at("transfer[0]", i, x, 5) for i, x in enumerate([m, h0, h1, o])]
    received = [
        at("q1", 0, m, 10),
        at("q2", 0, h0, 9),
        at("q2", 1, m, 10),
        at("q2", 2, h1, 50),
    ]
    cap = CapacitySpec(("transfer[0]",), ("q1", "q2"), release_slack_ms=0)
    r = verify([m, h0, h1, o], [*received, at("q1", 1, o, 60)], forwarded=upstream, capacity=cap)
    assert r.receive is not None and (r.receive.interleaved, r.receive.disallowed) == (1, 0)
    assert r.violations() == []
    ordinary = [received[0], received[1], at("q2", 1, o, 10), received[3], at("q2", 3, m, 51)]
    wrong = verify([m, h0, h1, o], ordinary, forwarded=upstream, capacity=cap)
    assert wrong.violations() == ["receive side: 1 disallowed interleavings"]
