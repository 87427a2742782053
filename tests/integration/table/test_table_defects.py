"""The management table's answers to defects found in review (issue 9), against the real
Redis: each test names the defect it proves closed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from router.table import room
from router.table.model import TableModel
from router.table.routing import HELD, PARKED, SKIPPED, SPANS, STOPPED, STOPPING, RouteRequest
from router.table.store.management import CALL_REQUESTS, ManagementTable, TableKeys
from tests.fixtures.helpers import unique


@pytest.fixture
def new_table(redis_client: redis.Redis) -> Iterator[Any]:
    made: list[ManagementTable] = []

    def make(dests: list[str], policy: str = "share", keys: TableKeys | None = None) -> Any:
        keys = keys or TableKeys.of(unique("defects"), "t", "send")
        t = ManagementTable(redis_client, keys, dests, policy)  # type: ignore[arg-type]
        made.append(t)
        return t

    yield make
    for t in made:
        t.drop()


def req(gid: str | None, lane: str, offset: int, **kw: Any) -> RouteRequest:
    final = kw.pop("final", False)
    return RouteRequest(gid, final, 60_000, f"{lane}/{offset}" if final else "", lane, **kw)


def restore(client: redis.Redis, snapshot: dict[str, Any]) -> None:
    """Put the table's keys back as dumped: the writes since are lost (a crash)."""
    for k, v in snapshot.items():
        if v is None:
            client.delete(k)
        else:
            client.restore(k, 0, v, replace=True)


def test_a_destination_freed_in_a_batch_takes_a_new_group_only_from_the_finals_lane(
    new_table: Any,
) -> None:
    """Defect 2. Batch b1 routes G's final (lane A) and then H's first message (lane B):
    H must not take G's destination. If b1 aborts, H's entry survives; its replay from
    lane B by another unit could be appended before G's final, which lane A's unit has
    not replayed yet: H inside G's span, uncounted."""
    t = new_table(["d0", "d1"], policy="hold")
    assert t.route([req("G", "A", 0), req("K", "C", 0)], batch="b0").decisions == ["d0", "d1"]
    result = t.route([req("G", "A", 1, final=True), req("H", "B", 0)], batch="b1")
    assert result.decisions == ["d0", HELD], "a new group took a destination freed by another lane"
    assert t.entry("H") is None
    # The same lane keeps its order in any replay: there the destination is free.
    result = t.route([req("G", "A", 1, final=True), req("H2", "A", 2)], batch="b2")
    assert result.decisions == ["d0", "d0"] and result.held == 0


def test_a_group_arriving_on_a_second_lane_is_refused_not_split(new_table: Any) -> None:
    """Defect 8. A group's order is one lane's order: a continuation of an open group
    from another lane answers SPANS (dead-lettered `group-spans-partitions` by the unit).
    A first message of the ID on another lane waits (HELD) until the release."""
    t = new_table(["d0", "d1"])
    assert t.route([req("G", "A", 0)]).decisions == ["d0"]
    assert t.route([req("G", "B", 1, continuation=True)]).decisions == [SPANS]
    assert t.route([req("G", "B", 0), req("G", "B", 1, continuation=True)]).decisions == [
        HELD,
        SKIPPED,
    ]
    assert t.route([req("G", "A", 1, final=True)]).decisions == ["d0"]
    assert t.route([req("G", "B", 5)]).decisions == [HELD]  # the ID reused on lane B
    assert t.release([("G", "A/1")]) == 1
    assert t.route([req("G", "B", 5)]).decisions[0] in ("d0", "d1")
    assert t.entry("G") is not None and t.entry("G").lane == "B"


def test_stopped_groups_and_dead_lettered_finals_free_their_destination(new_table: Any) -> None:
    """Defect 6. A group stopped by a poison message, and a group whose final was
    dead-lettered, give their destination back once their batch settles (not after
    their TTL). A stopped group's later messages are still parked."""
    t = new_table(["d0", "d1"])
    assert t.route([req("S", "A", 0), req("D", "B", 0)]).decisions == ["d0", "d1"]
    result = t.route([req("S", "A", 1, poison_stop=True), req("D", "B", 1, final=True, dead=True)])
    assert result.decisions == [STOPPING + "d0", "d1"]
    assert t.settle("batch", [], [("D", "B/1"), ("S", STOPPED)]) == 1
    assert t.loads() == {}
    assert t.route([req("S", "A", 2)]).decisions == [PARKED]
    assert t.entry("D") is None


def test_a_table_that_lost_its_latest_writes_is_a_reset(
    new_table: Any, redis_client: redis.Redis
) -> None:
    """Defect 5. A Redis crash under `appendfsync everysec` keeps the epoch but loses the
    last writes. The unit that made them sees fewer writes than it saw, starts a new
    epoch, and every other unit then sees the new epoch: a reset, whose groups with
    sequence numbers are parked, never split."""
    keys = TableKeys.of(unique("partial"), "t", "send")
    a = new_table(["d0", "d1"], keys=keys)
    b = new_table(["d0", "d1"], keys=keys)
    a.route([req("G1", "A", 0)])
    b.route([req("G0", "B", 0)])
    snapshot = {k: redis_client.dump(k) for k in keys.all()}
    a.route([req("G2", "A", 1)])  # lost in the "crash" below
    restore(redis_client, snapshot)
    assert a.entry("G2") is None and a.entry("G1") is not None
    epoch = a.epoch
    a.route([req("G3", "A", 2)])
    assert a.resets == 1 and a.epoch != epoch
    b.route([req("G4", "B", 1)])
    assert b.resets == 1 and b.epoch == a.epoch
    # Nothing lost since: no more resets.
    a.route([req("G5", "A", 3)])
    b.route([req("G6", "B", 2)])
    assert (a.resets, b.resets) == (1, 1)


def test_a_large_batch_is_routed_in_bounded_calls(new_table: Any) -> None:
    """Defect 7. batch_size may be 100,000: one route call would run over half a million
    arguments and block Redis for every unit. The table routes it in calls of at most
    CALL_REQUESTS requests, with the same guarantees: a group keeps one destination, a
    lane held in one call stays held."""
    t = new_table([f"d{i}" for i in range(4)], policy="hold")
    sizes: list[int] = []
    real = t._route

    def spy(keys: list[str], args: list[Any]) -> Any:
        sizes.append(len(args))
        return real(keys=keys, args=args)

    t._route = spy
    n = 9_000
    requests = [req(f"g{i % 40}", f"L{i % 40}", i) for i in range(n)]
    result = t.route(requests)
    assert len(sizes) >= n // CALL_REQUESTS
    head = len(t.head_args("batch"))
    assert max(sizes) <= head + 5 * CALL_REQUESTS
    placed: dict[str, str] = {}
    for r, d in zip(requests, result.decisions, strict=True):
        assert r.guarantee_id is not None
        if d[0] != "!":
            assert placed.setdefault(r.guarantee_id, d) == d
    # 40 groups on 4 destinations, policy hold: 4 placed, the others' lanes held, once.
    assert len(placed) == 4 and result.held == 36 and result.created == 4


def test_a_reused_id_waits_for_the_old_group_even_before_its_final_is_routed(
    new_table: Any,
) -> None:
    """Found by review: a sender finishes G and starts G again; its new first message
    reaches the table from another lane (another transfer partition) while the old G's
    lane is behind, its final not routed yet. It must wait for the release, not be
    dead-lettered as a group spanning partitions (which loses the whole new group)."""
    t = new_table(["d0", "d1"])
    old = t.route([req("G", "transfer/0", 0)]).decisions[0]
    first_again = req("G", "transfer/1", 0)  # seq 0: not a continuation
    assert t.route([first_again]).decisions == [HELD]
    assert t.route([req("G", "transfer/1", 1, continuation=True)]).decisions == [SPANS]
    t.route([req("G", "transfer/0", 1, final=True)])  # the lagging lane catches up
    assert t.release([("G", "transfer/0/1")]) == 1
    new = t.route([first_again]).decisions[0]
    assert new not in (HELD, SPANS) and t.entry("G").lane == "transfer/1"
    assert old in ("d0", "d1") and new in ("d0", "d1")


def test_a_reused_id_waits_no_longer_than_the_hold_timeout(new_table: Any) -> None:
    """Found by the fuzz run: waiting for an old group that never ends (its sender gave
    up) stopped the new first message's partition until the old entry's TTL. Once its hold
    timed out (a forced share) it is dead-lettered as spanning partitions instead."""
    t = new_table(["d0", "d1"])
    t.route([req("G", "transfer/0", 0)])  # never finishes
    assert t.route([req("G", "transfer/1", 0)]).decisions == [HELD]
    timed_out = req("G", "transfer/1", 0, force_share=True)
    assert t.route([timed_out, req(None, "transfer/1", 1)]).decisions[0] == SPANS
    assert t.entry("G").lane == "transfer/0"  # the old group keeps its entry


@pytest.mark.parametrize("policy", ["share", "hold", "wait"])
def test_an_id_reused_in_the_batch_of_its_final_waits_when_its_destination_was_taken(
    new_table: Any, policy: str
) -> None:
    """Found by the adversarial review of the lane hand-over (on main too): G's final
    frees d0 for its lane's next group H in the same batch; G's ID reused after that went
    to d0 as well, inside the open H, uncounted. It is a new group: it waits for G's
    release (held, whatever the policy), and then starts afresh."""
    t = new_table(["d0"], policy=policy)
    batch = [
        req("G", "A", 5, final=True),
        req("H", "A", 6),
        req("G", "A", 7),
        req("H", "A", 8, final=True),
    ]
    result = t.route(batch, batch="b1")
    assert result.decisions == ["d0", "d0", HELD, SKIPPED] and result.shared == 0
    # the batch commits up to G's reuse; its settle releases G's final, then the replay
    t.settle("b1", set(), [("G", "A/5")])
    assert t.entry("G") is None
    replay = t.route([req("G", "A", 7), req("H", "A", 8, final=True)], batch="b2")
    # H is still open on the one destination: G waits (wait), is held (hold) or shares
    expected = {"share": ["d0", "d0"], "hold": [HELD, SKIPPED], "wait": [room.WAIT, "d0"]}
    assert replay.decisions == expected[policy]


def test_a_lost_write_is_a_reset_even_after_other_units_wrote(
    new_table: Any, redis_client: redis.Redis
) -> None:
    """Found by review: one shared write counter, compared with what the caller saw, is
    pushed past the lost writes by any other unit that writes first after the crash. Each
    caller's own last write count is kept too: its next call sees that it is gone."""
    keys = TableKeys.of(unique("partial2"), "t", "send")
    a = new_table(["d0", "d1"], keys=keys)
    b = new_table(["d0", "d1"], keys=keys)
    a.route([req("G1", "A", 0)])
    snapshot = {k: redis_client.dump(k) for k in keys.all()}
    a.route([req("H", "A", 1)])  # lost in the "crash" below
    restore(redis_client, snapshot)
    for i in range(3):  # another unit writes first, several times
        b.route([req(f"K{i}", "B", i)])
    assert b.resets == 0  # b's own writes were not lost
    a.route([req("G2", "A", 2)])
    assert a.resets == 1, "unit A's lost write went unseen"
    b.route([req("K9", "B", 9)])
    assert b.resets == 1 and b.epoch == a.epoch  # everyone learns the new epoch
    a.route([req("G3", "A", 3)])
    b.route([req("K10", "B", 10)])
    assert (a.resets, b.resets) == (1, 1)  # nothing lost since: no more resets


def test_a_staged_group_over_the_bound_waits_streamed_in_the_lua_as_in_the_model(
    redis_client: redis.Redis,
) -> None:
    keys = TableKeys.of(unique("staged"), "t", "send")
    t = ManagementTable(redis_client, keys, ["d0"], "wait", 15_000, 2)
    try:
        busy = t.route([req("G", "A", 0)], batch="b0")
        assert busy.decisions == ["d0"]
        w = [req("W", "B", n, complete=True) for n in range(3)]
        assert t.route(w, batch="b1").decisions == [room.WAIT, room.UNSTAGED, room.WAIT]
        entry = t.entry("W")
        assert entry is not None and (entry.state, entry.parks) == (room.WAITING, 3)
        assert set(t.room()) == {"W"}
        model = TableModel(["d0"], "wait", max_staged=2)
        model.route([req("G", "A", 0)], 0, batch="b0")
        assert model.route(w, 0, batch="b1").decisions == [room.WAIT, room.UNSTAGED, room.WAIT]
    finally:
        t.drop()
