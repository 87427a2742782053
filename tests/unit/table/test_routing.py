"""The routing rules on the pure model (the specification the Lua scripts must match)."""

from __future__ import annotations

from router.table.model import TableModel
from router.table.routing import DUE_STEPS, HELD, SKIPPED, RouteRequest, updated_at


def req(
    gid: str | None,
    final: bool = False,
    lane: str = "q/0",
    token: str = "",
    force: bool = False,
    ttl: int = 1000,
) -> RouteRequest:
    return RouteRequest(gid, final, ttl, token or f"{lane}/{gid}", lane, force)


def test_patent_worked_example_on_the_send_table() -> None:
    # Figures 17-25: group X (3 messages) and group Y from two send queues, ordinary
    # message "1", three receive-side units.
    t = TableModel(["unit1", "unit2", "unit3"])
    x = t.route([req("X", lane="A1/0")], 0).decisions[0]
    x2, y = t.route([req("X", lane="A1/0"), req("Y", lane="A2/0")], 1).decisions
    one = t.route([req(None, lane="A2/0")], 2).decisions[0]
    x3 = t.route([req("X", final=True, lane="A1/0", token="A1/0/2")], 3).decisions[0]
    assert x == x2 == x3
    assert len({x, y, one}) == 3  # Y and "1" never enter X's path, nor each other's
    assert t.entries["X"].closing == "A1/0/2"  # released only after the commit
    assert t.release([("X", "A1/0/2")]) == 1
    assert set(t.entries) == {"Y"} and t.load == {y: 1}


def test_known_group_keeps_its_destination_and_refreshes_update_time() -> None:
    t = TableModel(["a", "b"])
    first = t.route([req("g")], 100).decisions[0]
    assert t.route([req("g", ttl=5000)], 900).decisions[0] == first
    # the update time: its last use rounded up to a step of TTL / 16 (312 ms here)
    assert t.entries["g"].updated_ms == 936 == updated_at(900, 5000)
    assert t.entries["g"].ttl_ms == 5000
    assert t.entries["g"].opened_ms == 100


def test_an_entrys_update_time_is_never_before_its_last_use_nor_a_step_after() -> None:
    for ttl in (1, 15, 16, 1_000, 5_000, 300_000, 3_600_000):
        step = max(1, ttl // DUE_STEPS)
        for now in (0, 1, 99, 1_000_000, 1_700_000_000_123):
            u = updated_at(now, ttl)
            assert now <= u < now + step and u % step == 0
            assert updated_at(u, ttl) == u  # a use at that time changes nothing


def test_ties_are_broken_by_a_rotating_cursor() -> None:
    t = TableModel(["a", "b", "c"])
    assert t.route([req("g1")], 0).decisions == ["a"]
    assert t.route([req("g2")], 0).decisions == ["b"]
    t.release([("g1", "*")])
    # "a" is free again, but the cursor points past "b": "c" is next.
    assert t.route([req("g3")], 0).decisions == ["c"]
    assert t.route([req("g4")], 0).decisions == ["a"]


def test_share_policy_places_on_the_least_loaded_destination_when_all_busy() -> None:
    t = TableModel(["a", "b"])
    t.route([req("g1"), req("g2"), req("g3")], 0)
    result = t.route([req(None)], 0)
    assert result.shared == 1
    assert result.decisions == ["b"]  # a has 2 open groups, b has 1
    assert t.load == {"a": 2, "b": 1}


def test_hold_policy_holds_and_skips_the_rest_of_the_lane() -> None:
    t = TableModel(["a"], policy="hold")
    t.route([req("g1", lane="p/0")], 0)
    result = t.route(
        [
            req("g2", lane="p/1"),
            req("g1", lane="p/1"),
            req("g1", lane="p/0"),
            req(None, lane="p/2"),
        ],
        1,
    )
    assert result.decisions == [HELD, SKIPPED, "a", HELD]
    assert result.held == 2 and "g2" not in t.entries
    # A hold that timed out is shared instead.
    assert t.route([req("g2", lane="p/1", force=True)], 2).decisions == ["a"]


def test_a_group_closed_earlier_in_the_batch_frees_its_destination_for_the_batch() -> None:
    t = TableModel(["a"])
    t.route([req("g1")], 0)
    result = t.route([req("g1", final=True, token="q/0/5"), req("g2")], 1)
    assert result.decisions == ["a", "a"] and result.shared == 0
    # Another batch still sees "a" busy until the first one commits and settles.
    assert t.route([req(None)], 2, batch="other").shared == 1


def test_ordinary_messages_of_a_batch_fence_their_destination_for_new_groups() -> None:
    t = TableModel(["a", "b"])
    assert t.route([req(None), req(None)], 0, batch="b1").decisions == ["a", "a"]
    # Another batch's new group avoids "a" while b1's ordinary messages are in flight.
    assert t.route([req("g")], 1, batch="b2").decisions == ["b"]
    t.settle("b1", ["a"], [])
    t.release([("g", "*")])
    t.cursor = 0
    assert t.route([req("h")], 2, batch="b3").decisions == ["a"]


def test_expired_lease_stops_fencing() -> None:
    t = TableModel(["a", "b"])
    t.route([req(None)], 0, batch="dead-unit", lease_ms=100)
    t.cursor = 0
    assert t.route([req("g")], 50, batch="b2").decisions == ["b"]
    t.cursor = 0
    assert t.route([req("h")], 200, batch="b3").decisions == ["a"]


def test_final_release_needs_the_matching_token_and_a_reused_id_cancels_it() -> None:
    t = TableModel(["a", "b"])
    t.route([req("g", final=True, token="q/0/9")], 0)
    assert t.release([("g", "q/0/8")]) == 0  # a different final
    t.route([req("g")], 1)  # the ID is used again before the release
    assert t.release([("g", "q/0/9")]) == 0
    assert "g" in t.entries


def test_sweep_removes_only_entries_idle_past_their_ttl() -> None:
    t = TableModel(["a", "b"])
    t.route([req("old", ttl=100)], 0)
    t.route([req("fresh", ttl=100)], 50)
    assert [s.guarantee_id for s in t.sweep(now_ms=100)] == []  # idle 100 = TTL: kept
    assert [s.guarantee_id for s in t.sweep(now_ms=101)] == ["old"]
    assert set(t.entries) == {"fresh"} and sum(t.load.values()) == 1


def _destinations(t: TableModel, batch: list[RouteRequest]) -> tuple[list[str], list[str]]:
    """The batch's decisions, and what the one destination "a" is sent, in order."""
    decisions = t.route(batch, 0, batch="b1").decisions
    return decisions, [
        r.guarantee_id or "-" for r, d in zip(batch, decisions, strict=True) if d == "a"
    ]


def test_an_id_reused_in_the_batch_of_its_final_waits_when_its_destination_was_taken() -> None:
    """g1's final frees "a" for its lane's next group g2 in the same batch; g1's ID reused
    after that is a new group, which must not open inside g2: it waits for g1's release
    (held, whatever the policy), and the rest of its lane waits behind it. Found by the
    adversarial review of the lane hand-over; before, it went to "a" inside open g2."""
    for policy in ("share", "hold", "wait"):
        t = TableModel(["a"], policy=policy)  # type: ignore[arg-type]
        batch = [
            req("g1", final=True, token="q/0/5"),
            req("g2", token="q/0/6"),
            req("g1", token="q/0/7"),
            req("g2", final=True, token="q/0/8"),
        ]
        decisions, on_a = _destinations(t, batch)
        assert decisions == ["a", "a", HELD, SKIPPED], policy
        assert on_a == ["g1", "g2"]
        assert t.entries["g1"].closing == "q/0/5"  # still released by its final
        assert t.release([("g1", "q/0/5")]) == 1


def test_a_one_message_group_reusing_the_id_also_waits() -> None:
    t = TableModel(["a"])
    batch = [
        req("g1", final=True, token="q/0/5"),
        req("g2", token="q/0/6"),
        req("g1", final=True, token="q/0/7"),
    ]
    assert t.route(batch, 0).decisions == ["a", "a", HELD]


def test_an_id_reused_in_the_batch_of_its_final_keeps_its_destination_when_untaken() -> None:
    t = TableModel(["a"])
    batch = [req("g1", final=True, token="q/0/5"), req(None), req("g1", token="q/0/7")]
    decisions, on_a = _destinations(t, batch)
    assert decisions == ["a", "a", "a"]  # an ordinary message between two groups is fine
    assert on_a == ["g1", "-", "g1"]
    assert t.entries["g1"].closing == ""  # the reuse cancels the old release


def test_a_held_reuse_is_shared_and_counted_once_its_hold_timed_out() -> None:
    t = TableModel(["a"])
    batch = [
        req("g1", final=True, token="q/0/5"),
        req("g2", token="q/0/6"),
        req("g1", token="q/0/7", force=True),
    ]
    result = t.route(batch, 0)
    assert result.decisions == ["a", "a", "a"] and result.shared == 1


def test_under_wait_a_timed_out_hold_of_a_reuse_still_waits_for_the_release() -> None:
    t = TableModel(["a"], policy="wait")
    batch = [
        req("g1", final=True, token="q/0/5"),
        req("g2", token="q/0/6"),
        req("g1", token="q/0/7", force=True),
    ]
    result = t.route(batch, 0)
    assert result.decisions == ["a", "a", HELD] and result.shared == 0
