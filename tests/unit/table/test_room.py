"""The waiting room's rules on the pure table model (policy `wait`, `router.table.room`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.metrics.registry import wait_bucket
from router.table import room, waits
from router.table.model import TableModel
from router.table.routing import NO_DEST, STOPPING, RouteRequest, TraceStep


def req(
    gid: str | None, final: bool = False, lane: str = "q/0", stop: bool = False
) -> RouteRequest:
    return RouteRequest(gid, final, 60_000, f"{lane}/{gid}/{final}", lane, poison_stop=stop)


def test_groups_beyond_capacity_wait_and_are_admitted_first_come_first_served() -> None:
    t = TableModel(["a", "b"], policy="wait")
    assert t.route([req("g1"), req("g2")], 0, batch="b1").decisions == ["a", "b"]
    # No clean destination left: g3 and g4 wait, in arrival order, and nothing is shared.
    r = t.route([req("g3"), req("g4"), req("g3")], 10, batch="b2")
    assert r.decisions == [room.WAIT] * 3 and r.shared == 0
    assert t.room == {"g3": 10, "g4": 10} and t.entries["g3"].parks == 2
    t.settle("b2", [], [])
    # g1 ends: its destination goes to the oldest waiting group (ties by ID), reserved.
    t.route([req("g1", final=True)], 20, batch="b3")
    t.settle("b3", [], [("g1", "q/0/g1/True")])
    assert t.entries["g3"].state == room.ADMITTED and t.entries["g3"].dest == "a"
    assert t.room == {"g4": 10} and t.load == {"a": 1, "b": 1}
    # Admitted, not yet drained: g3's later messages, its final too, are still parked
    # behind the earlier ones; the final is released once drained and committed.
    assert t.route([req("g3", final=True)], 30, batch="b4").decisions == [room.WAIT]
    assert t.entries["g3"].closing == "q/0/g3/True"
    t.settle("b4", [], [])
    t.settle("d1", [], [("g3", "q/0/g3/True")], drains=[("g3", 3)])
    assert "g3" not in t.entries
    assert t.entries["g4"].state == room.ADMITTED and t.entries["g4"].dest == "a"


def test_an_admitted_group_opens_only_when_every_park_is_drained_and_none_is_in_flight() -> None:
    t = TableModel(["a"], policy="wait")
    t.route([req("g1")], 0, batch="b1")
    t.route([req("g2")], 0, batch="b2")  # waits; park lease of b2 in flight
    t.settle("b1", [], [])
    t.release([("g1", "*")])
    assert t.entries["g2"].state == room.ADMITTED
    t.settle("d1", [], [], drains=[("g2", 1)])
    assert t.entries["g2"].state == room.ADMITTED  # b2 has not settled: a park in flight
    t.settle("b2", [], [])
    t.route([req("g2")], 5, batch="b3")  # parked after the drainer read the room
    t.settle("b3", [], [])
    t.settle("d2", [], [], drains=[("g2", 1)])
    assert t.entries["g2"].state == room.ADMITTED  # 2 parks, the drainer saw 1
    t.settle("d3", [], [], drains=[("g2", 2)])
    assert t.entries["g2"].state == room.OPEN
    assert t.route([req("g2")], 9, batch="b4").decisions == ["a"]


def test_ordinary_messages_wait_in_their_lanes_pseudo_group_and_go_first_when_they_can() -> None:
    t = TableModel(["a"], policy="wait")
    t.route([req("g1")], 0, batch="b1")
    assert t.route([req(None), req(None)], 1, batch="b2").decisions == [room.WAIT] * 2
    pg = room.ordinary_group("q/0")
    assert t.entries[pg].parks == 2 and t.room == {pg: 1}
    t.settle("b2", [], [])
    t.release([("g1", "*")])
    assert t.entries[pg].state == room.ADMITTED
    t.settle("d1", [], [], drains=[(pg, 2)])
    assert pg not in t.entries and t.load == {}  # released, not opened
    assert t.route([req(None)], 2, batch="b3").decisions == ["a"]


def test_a_group_stopped_in_the_room_leaves_it() -> None:
    t = TableModel(["a"], policy="wait")
    t.route([req("g1")], 0, batch="b1")
    t.route([req("g2")], 0, batch="b2")
    assert t.route([req("g2", stop=True)], 1, batch="b3").decisions == [STOPPING + NO_DEST]
    assert t.room == {}
    t.release([("g1", "*")])
    assert t.load == {}  # nothing admitted: g2 no longer waits


def test_the_other_policies_never_use_the_room() -> None:
    for policy in ("share", "hold"):
        t = TableModel(["a"], policy=policy)  # type: ignore[arg-type]
        t.route([req("g1"), req("g2"), req(None)], 0)
        assert t.room == {} and all(e.state == room.OPEN for e in t.entries.values())


# ------------------------------------------------------------------ random histories

GROUPS = [f"g{i}" for i in range(8)]
LANES = ["q/0", "q/1"]

step = st.one_of(
    st.tuples(st.just("msg"), st.sampled_from([*GROUPS, None]), st.sampled_from(LANES)),
    st.tuples(st.just("end"), st.sampled_from(GROUPS), st.sampled_from(LANES)),
    st.tuples(st.just("settle"), st.just(None), st.just("")),
    st.tuples(st.just("drain"), st.just(None), st.just("")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=60), st.integers(1, 3))
def test_no_destination_ever_carries_two_groups_and_every_group_gets_through(
    history: list[tuple[str, str | None, str]], ndest: int
) -> None:
    """Under `wait`, whatever the interleaving of batches, settles and drains: at most one
    group (open or admitted) per destination, ordinary messages only where no group is
    open, and once everything is settled and drained, every group has been admitted."""
    t = TableModel([f"d{i}" for i in range(ndest)], policy="wait")
    lane_of: dict[str, str] = {}
    pending: list[tuple[str, list[tuple[str, str]]]] = []  # unsettled batches: (id, finals)
    ended: set[str] = set()
    now = 0

    def check(trace: list[TraceStep]) -> None:
        assert all(n <= 1 for n in t.load.values()), t.load
        for s in trace:
            if s.request.guarantee_id is None and not s.decision.startswith("!"):
                assert s.decision in s.free, "an ordinary message entered an open group"

    def drain_all() -> None:
        drains = [(g, e.parks) for g, e in t.entries.items() if e.state == room.ADMITTED]
        finals = [
            (g, t.entries[g].closing)
            for g, _ in drains
            if t.entries[g].closing and not room.is_pseudo(g)
        ]
        t.settle(f"drain{now}", [], finals, drains=drains)

    for kind, gid, drawn_lane in history:
        now += 1
        if kind in ("msg", "end"):
            lane = drawn_lane
            if gid is not None:
                if gid in ended:
                    continue
                lane = lane_of.setdefault(gid, drawn_lane)
            trace: list[TraceStep] = []
            r = req(gid, final=kind == "end", lane=lane)
            batch = f"b{now}"
            d = t.route([r], now, batch=batch, trace=trace).decisions[0]
            check(trace)
            finals = []
            if kind == "end" and gid is not None:
                ended.add(gid)
                if not d.startswith("!"):
                    finals.append((gid, r.token))
            pending.append((batch, finals))
        elif kind == "settle" and pending:
            batch, finals = pending.pop(0)
            dests = [d for (d, b) in t.inflight if b == batch]
            t.settle(batch, dests, finals)
        elif kind == "drain":
            drain_all()
        check([])
    # Every group ends (its final, on its lane), and every batch settles.
    for g in sorted(set(lane_of) - ended):
        now += 1
        r = req(g, final=True, lane=lane_of[g])
        d = t.route([r], now, batch=f"b{now}").decisions[0]
        pending.append((f"b{now}", [] if d.startswith("!") else [(g, r.token)]))
        ended.add(g)
    for batch, finals in pending:
        t.settle(batch, [d for (d, b) in t.inflight if b == batch], finals)
    for _ in range(len(GROUPS) + 2):
        drain_all()
        check([])
    assert t.room == {}, "a group was never admitted"
    for g in ended:
        assert g not in t.entries, f"{g} ended but was never released"


def test_wait_histogram_buckets_are_upper_bounds() -> None:
    assert [wait_bucket(ms) for ms in (0, 100, 101, 1_000, 9_999, 60_000, 60_001)] == [
        "room_wait_le_100ms",
        "room_wait_le_100ms",
        "room_wait_le_1s",
        "room_wait_le_1s",
        "room_wait_le_10s",
        "room_wait_le_60s",
        "room_wait_gt_60s",
    ]


def whole(gid: str, final: bool = False, lane: str = "q/0") -> RouteRequest:
    r = req(gid, final, lane)
    r.complete = True
    return r


def test_a_whole_group_is_staged_until_its_final_and_holds_a_destination_only_then() -> None:
    t = TableModel(["a"], policy="wait")
    # Staged, although "a" is free; it is not in the FIFO, so others do not queue behind it.
    assert t.route([whole("w"), whole("w")], 0, batch="b1").decisions == [room.WAIT] * 2
    assert t.entries["w"].state == room.STAGED and t.room == {} and t.load == {}
    assert t.route([req("g1")], 1, batch="b2").decisions == ["a"]
    t.settle("b1", [], [])
    # Its final completes it: from now it waits, first come first served.
    assert t.route([whole("w", final=True)], 5, batch="b3").decisions == [room.WAIT]
    assert t.entries["w"].state == room.WAITING and t.room == {"w": 5}
    t.settle("b3", [], [])
    t.settle("b2", [], [])
    t.route([req("g1", final=True)], 6, batch="b4")
    t.settle("b4", [], [("g1", "q/0/g1/True")])
    assert t.entries["w"].state == room.ADMITTED and t.load == {"a": 1}
    # The drain writes all of it in one transaction; its final's release frees "a".
    t.settle("d1", [], [("w", "q/0/w/True")], drains=[("w", 3)])
    assert "w" not in t.entries and t.load == {}


def test_a_whole_group_of_one_message_waits_at_once_and_other_policies_stream_it() -> None:
    t = TableModel(["a"], policy="wait")
    assert t.route([whole("one", final=True)], 0).decisions == [room.WAIT]
    assert t.entries["one"].state == room.WAITING and t.room == {"one": 0}
    share = TableModel(["a"], policy="share")
    assert share.route([whole("w")], 0).decisions == ["a"]  # needs the room: streamed


def test_a_staged_group_over_the_bound_waits_streamed_from_then_on() -> None:
    t = TableModel(["a"], policy="wait", max_staged=3)
    t.route([req("g1")], 0)  # "a" busy
    assert t.route([whole("w"), whole("w")], 1).decisions == [room.WAIT, room.WAIT]
    assert t.entries["w"].state == room.STAGED
    # The third parked message reaches the bound: staging ends (said once), and w waits
    # in the FIFO as a streamed group; its next messages park as usual.
    assert t.route([whole("w"), whole("w")], 2).decisions == [room.UNSTAGED, room.WAIT]
    assert t.entries["w"].state == room.WAITING and t.room == {"w": 2}
    one = TableModel(["a"], policy="wait", max_staged=1)
    assert one.route([whole("x")], 0).decisions == [room.UNSTAGED]
    assert one.entries["x"].state == room.WAITING


# ------------------------------------------------------------------ leases that never settle


def test_a_dead_batchs_in_flight_lease_stops_fencing_at_its_expiry_with_nothing_routed() -> None:
    """The stall of the waiting room (chaos, policy `wait`): a unit routed ordinary
    messages to every destination and died before settling. Its in-flight leases keep
    every destination unclean; once the senders stopped, no route call ended them, and
    releases or sweeps admitted nothing until routing.max_wait_ms timed the groups out.
    `room.expire` (the sweeper's round) ends them at their expiry."""
    t = TableModel(["a", "b"], policy="wait")
    assert t.route([req(None)], 0, batch="dead1", lease_ms=10_000).decisions == ["a"]
    assert t.route([req(None)], 0, batch="dead2", lease_ms=10_000).decisions == ["b"]
    assert t.route([req("g1"), req("g2")], 1, batch="b1").decisions == [room.WAIT] * 2
    t.settle("b1", [], [])
    t.release([])  # a release admits what it can: nothing, every destination is leased
    assert t.room == {"g1": 1, "g2": 1} and t.load == {}
    assert room.expire(t, 9_999) == (0, [])  # not expired yet: still fenced
    assert room.expire(t, 10_000) == (2, ["g1", "g2"])
    assert t.inflight == {} and t.load == {"a": 1, "b": 1}
    assert {g: t.entries[g].dest for g in ("g1", "g2")} == {"g1": "a", "g2": "b"}


def test_a_failed_batchs_park_lease_keeps_its_group_shut_only_until_its_expiry() -> None:
    """A batch that parked g2's message failed (aborted, replayed as another batch): its
    park lease never settles. The drain's switch to open waits for it to end, and with
    nothing routed any more only `room.expire` ends it."""
    t = TableModel(["a"], policy="wait")
    t.route([req("g1")], 0, batch="b1")
    t.route([req("g2")], 0, batch="failed", lease_ms=10_000)  # parked, never settled
    t.route([req("g2")], 1, batch="replay", lease_ms=10_000)  # the replay, settled
    t.settle("replay", [], [])
    t.settle("b1", [], [("g1", "q/0/g1/False")])
    t.release([("g1", "*")])
    assert t.entries["g2"].state == room.ADMITTED
    assert room.drained(t, "g2", 2) == room.ADMITTED  # a park lease in flight
    assert room.expire(t, 10_000) == (1, [])
    assert room.drained(t, "g2", 2) == room.OPEN


def test_a_wait_time_out_under_report_is_said_once_and_the_group_keeps_its_place() -> None:
    """Policy "report" (the default): a group (and a lane's ordinary messages) past
    max_wait_ms is reported once, stays in the room in its place, and is admitted only to
    a clean destination: nothing is shared. Each round looks only at the newly overdue."""
    t = TableModel(["a"], policy="wait")
    t.route([req("g1")], 0, batch="b1")  # g1 holds the only destination
    t.route([req("g2")], 10, batch="b2")
    t.route([req(None, lane="q/1")], 20, batch="b3")  # ordinary: its lane's pseudo-group
    assert waits.time_out(t, 1_000, 1_000, "report") == []
    assert waits.time_out(t, 1_015, 1_000, "report") == [("g2", room.WAIT)]
    assert waits.time_out(t, 1_030, 1_000, "report") == [("~q/1", room.WAIT)]  # only the new
    assert waits.time_out(t, 9_000, 1_000, "report") == []  # said once
    assert t.room == {"g2": 10, "~q/1": 20} and t.load == {"a": 1}
    t.route([req("g3")], 9_000, batch="b4")  # a later group queues behind them
    for b in ("b1", "b2", "b3", "b4"):
        t.settle(b, [], [])
    t.route([req("g1", final=True)], 9_010, batch="b5")
    t.settle("b5", [], [("g1", "q/0/g1/True")])
    assert t.entries["g2"].state == room.ADMITTED and t.entries["g2"].dest == "a"
    assert list(t.room) == ["~q/1", "g3"] and t.load == {"a": 1}
    assert waits.time_out(t, 20_000, 1_000, "report") == [("g3", room.WAIT)]


def test_a_replayed_forced_reuse_of_a_whole_group_answers_unstaged_again() -> None:
    """Found by the property test (chained-drains machine): the ID reused after a staged
    group's final, forced to join it, answers UNSTAGED (a GroupStagingAborted event); its
    replay after the batch aborted must too, or the event is never committed."""
    t = TableModel(["d0"], policy="wait", max_staged=2)
    n = 0

    def msg(gid: str | None, final: bool = False) -> RouteRequest:
        nonlocal n
        n += 1
        r = RouteRequest(gid, final, 1_000, f"q1/0/{n}", "q1/0", force_share=True)
        r.complete = gid is not None
        return r

    first = [msg(None) for _ in range(10)] + [msg("g0", final=True)]
    assert t.route(first, 0, batch="b1").decisions == ["d0"] * 10 + [room.WAIT]
    t.settle("b1", ["d0"], [])
    batch = [msg(None) for _ in range(5)] + [msg("g0")]  # g0's ID reused, forced: it joins
    assert t.route(batch, 0, batch="b2").decisions[-1] == room.UNSTAGED
    # b2's transaction aborts; the next owner routes the same records again
    assert t.route(batch, 0, batch="b3").decisions[-1] == room.UNSTAGED
