"""A caller's memory of its groups, without Redis: which members it decides, and when it
forgets (router.table.store.memory)."""

from __future__ import annotations

from router.table.routing import HELD, SKIPPED, RouteRequest, updated_at
from router.table.store.memory import GroupMemory, Split, plain

TTL = 16_000
NOW = 5_000_000
CLAIMS = {"q/0": "t1", "q/1": "t2"}


def member(gid: str, lane: str = "q/0", n: int = 1, **kw: object) -> RouteRequest:
    return RouteRequest(gid, False, TTL, f"{lane}/{n}", lane, continuation=True, **kw)  # type: ignore[arg-type]


def taught(*gids: str, lane: str = "q/0") -> GroupMemory:
    m = GroupMemory()
    sent = [member(g, lane) for g in gids]
    marks = ",".join(str(i) for i in range(len(sent)))
    m.learn(sent, ["d1"] * len(sent), marks, "0", "e1", NOW, False, CLAIMS)
    return m


def test_a_remembered_groups_plain_members_are_decided_and_the_others_sent() -> None:
    m = taught("A", "B")
    batch = [member("A", n=2), member("C", n=3), member("B", n=4), member("A", n=5)]
    split = m.split(batch, CLAIMS)
    assert split.sent == [1]
    assert split.local == {0: "d1", 2: "d1", 3: "d1"}
    assert split.steps == {TTL: updated_at(NOW, TTL)} and split.lanes == {"q/0"}
    assert split.args("0") == [3, "0", 1, TTL, updated_at(NOW, TTL)]
    assert m.merge(batch, split, ["d2"]) == ["d1", "d2", "d1", "d1"]
    assert m.decided == 3
    assert m.merge(batch, split, [HELD]) == ["d1", HELD, SKIPPED, SKIPPED] and m.decided == 4


def test_a_group_with_a_message_sent_is_forgotten_for_the_rest_of_the_batch() -> None:
    m = taught("A")
    final = RouteRequest("A", True, TTL, "q/0/3", "q/0", continuation=True)
    split = m.split([member("A", n=2), final, member("A", n=4)], CLAIMS)
    assert split.local == {0: "d1"} and split.sent == [1, 2]
    assert "A" not in m.groups


def test_only_plain_members_on_the_same_lane_ttl_and_claim_are_decided() -> None:
    m = taught("A", "B", "C", "D", "E")
    batch = [
        member("A", dead=True),
        member("B", force_share=True),
        RouteRequest("C", False, TTL * 10, "q/0/1", "q/0", continuation=True),
        member("D", lane="q/1"),
        member("E", seq=3),
    ]
    assert not any(plain(r) for r in (batch[0], batch[1], batch[4]))
    split = m.split(batch, CLAIMS)
    assert split.local == {} and split.sent == [0, 1, 2, 3, 4]
    m = taught("A")
    assert m.split([member("A")], {"q/0": "t9"}).local == {}  # the lane claimed again


def test_a_step_that_moved_on_sends_the_member() -> None:
    m = taught("A")
    m.now_ms = NOW + TTL  # a later reply's time: another step
    assert m.split([member("A")], CLAIMS).sent == [0]


def test_members_after_a_hold_on_their_lane_are_skipped() -> None:
    m = taught("A", "B", lane="q/0")
    m.learn([member("C", "q/1")], ["d3"], "0", "0", "e1", NOW, False, CLAIMS)
    batch = [member("A", n=1), member("X", n=2), member("B", n=3), member("C", "q/1", n=4)]
    split = m.split(batch, CLAIMS)
    assert split.sent == [1]
    assert m.merge(batch, split, [HELD]) == ["d1", HELD, SKIPPED, "d3"]


def test_a_new_generation_epoch_or_a_lost_table_forgets_everything() -> None:
    for generation, epoch, reset in (("1", "e1", False), ("0", "e2", False), ("0", "e1", True)):
        m = taught("A", "B")
        m.learn([member("C")], ["d2"], "0", generation, epoch, NOW, reset, CLAIMS)
        assert set(m.groups) == (set() if reset else {"C"})


def test_unmarked_or_unclaimed_groups_are_not_remembered() -> None:
    m = GroupMemory()
    sent = [member("A"), member("B"), member("C", "q/9")]
    m.learn(sent, ["d1", "d1", "d1"], "0,2", "0", "e1", NOW, False, CLAIMS)
    assert set(m.groups) == {"A"}
    m.learn([member("A")], ["d1"], "", "0", "e1", NOW, False, CLAIMS)  # written since
    assert m.groups == {}


def test_the_oldest_groups_go_first_past_the_limit() -> None:
    m = GroupMemory(limit=2)
    for g in ("A", "B", "C"):
        m.learn([member(g)], ["d1"], "0", "0", "e1", NOW, False, CLAIMS)
    assert list(m.groups) == ["B", "C"]


def test_an_empty_split_sends_everything() -> None:
    assert Split().args("7") == [0]
    assert GroupMemory().split([member("A")], CLAIMS).sent == [0]


def test_a_member_whose_step_passed_by_the_callers_clock_is_sent() -> None:
    """Without the call's time, the last reply's time moved on by the caller's clock: a
    member whose step has passed is sent (not refused by the script as stale)."""
    t = [100.0]
    m = GroupMemory(clock=lambda: t[0])
    m.learn([member("A")], ["d1"], "0", "0", "e1", NOW, False, CLAIMS)
    assert m.split([member("A")], CLAIMS).local == {0: "d1"}
    t[0] += 2 * TTL / 16 / 1000  # two steps later
    assert m.split([member("A")], CLAIMS).sent == [0]


def test_a_group_whose_final_the_call_carries_is_sent() -> None:
    m = taught("A", "B")
    split = m.split([member("A"), member("B")], CLAIMS, carried=["A"])
    assert split.sent == [0] and split.local == {1: "d1"} and "A" not in m.groups
