"""Adversarial review of logical order (`guarantee-order: logical`) on the pure waiting-room
harness (model table, real classify/emit/drain steps, fake room log; no Kafka, no Redis).

The guarantee checked, from what the harness delivers and dead-letters only: each member of
a group is delivered once or dead-lettered with a reason, the delivered members are in
sequence order on one destination, with nothing else between them. Defects found are kept
as strict xfails (their reason says what goes wrong); the other tests passed."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from router import contract
from router.contract import events
from router.table.routing import HELD, SKIPPED
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.logical import (
    LOGICAL,
    Review,
    aborted_drain,
    assert_in_order,
    dead_seqs,
    delivered_seqs,
    drain_all,
    gid_of,
    member,
    seq_of,
    unsettled_drain,
)
from tests.fixtures.roomharness import Side


def gap_events(side: Side) -> list[dict[str, Any]]:
    return [e for s, e in side.events if s == events.SEQUENCE_GAP]


# --- defects (strict xfail) ---


@pytest.mark.parametrize("rebuilt", [False, True])
def test_an_id_reused_after_a_finished_group_is_not_judged_by_the_old_markers(
    rebuilt: bool,
) -> None:
    """G0 goes straight, G2 (final) from lane 1 puts G in the room, G1 arrives, the drain
    forwards 1, 2 with a marker `next=3`; G is released. Later the ID is reused: a new G0
    goes straight (a new entry), G1 from another lane puts it in the room. The old marker
    (for the group started at the old G0) does not count for the new group: its drain
    starts at the table's next number, 1 (found by the review: it started at 3 and the
    new G1 was dead-lettered as a duplicate). Also with the drain's index rebuilt from
    the room between the two groups."""
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1, final=True))
    side.route(3, member(1, "G", 1, 0))
    now = drain_all(side, 4)
    assert_in_order(side, "G", [0, 1, 2])
    assert "G" not in side.model.entries, "released"
    before = len(side.delivered)
    if rebuilt:
        side.rebuild()
    # The ID reused: a new group of three members.
    side.route(now, member(2, "G", 0, 0, tag="new"))
    side.route(now + 1, member(1, "G", 1, 1, tag="new"))
    side.route(now + 2, member(2, "G", 2, 1, final=True, tag="new"))
    drain_all(side, now + 3)
    new = [seq_of(v) for _, v in side.delivered[before:] if gid_of(v) == "G"]
    assert side.dead_values == [], side.dead_values
    assert new == [0, 1, 2]


def test_a_duplicate_final_does_not_keep_the_group_forever() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1, final=True))  # the final, from lane 1
    side.route(3, member(0, "G", 2, 2, final=True, tag="retry"))  # its retry, lane 2
    side.route(4, member(1, "G", 1, 0))
    now = drain_all(side, 5)
    assert_in_order(side, "G", [0, 1, 2])
    assert dead_seqs(side, "G", "duplicate-seq") == [2]
    side.route(now, member(0, "H", 0, 3, final=True))  # another group, one destination
    drain_all(side, now + 1)
    assert "G" not in side.model.entries, "G released after its final"
    assert delivered_seqs(side, "H") == [0], "H is not kept waiting for G's TTL"


def test_gap_policy_deliver_goes_past_two_gaps_before_the_final() -> None:
    side = Review(["0"])
    side.drain.logical.gap_timeout_ms, side.drain.logical.gap_policy = 1_000, "deliver"
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), member(1, "G", 4, 1, final=True))  # 1, 3 missing
    now = 3
    for _ in range(10):  # the drain keeps running, far past several gap timeouts
        side.run_drain(now := now + 1_000)
    assert len(gap_events(side)) >= 1
    assert_in_order(side, "G", [0, 2, 4])
    assert "G" not in side.model.entries


def test_an_aborted_drain_at_the_gap_timeout_does_not_lose_the_event_nor_the_skip() -> None:
    side = Review(["0"])
    side.drain.logical.gap_timeout_ms, side.drain.logical.gap_policy = 1_000, "deliver"
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), member(1, "G", 3, 1, final=True))  # 1 missing
    side.run_drain(10)  # the gap is seen
    out = aborted_drain(side, 2_000)  # timed out: event + skip, in a batch that aborts
    assert out.sequence_gaps == 1
    side.drain.reset()  # even a full rewind of the drain does not help
    now = 2_001
    for _ in range(10):
        side.run_drain(now := now + 1_000)
    assert len(gap_events(side)) == 1, "the SequenceGap event is published once"
    assert_in_order(side, "G", [0, 2, 3])


def test_gap_deliver_a_skipped_member_after_the_release_is_dead_lettered() -> None:
    side = Review(["0", "1"])
    side.drain.logical.gap_timeout_ms, side.drain.logical.gap_policy = 1_000, "deliver"
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(1, "G", 2, 0), member(2, "G", 3, 0, final=True))  # 1 missing
    now = 3
    for _ in range(5):
        side.run_drain(now := now + 1_000)
    assert_in_order(side, "G", [0, 2, 3])
    assert "G" not in side.model.entries
    side.route(now, member(0, "G", 1, 1))  # the skipped member, late, from another lane
    drain_all(side, now + 1)
    assert delivered_seqs(side, "G") == [0, 2, 3], "seq 1 is not delivered after the final"
    assert dead_seqs(side, "G", "duplicate-seq") == [1]
    assert "G" not in side.model.entries, "no phantom group"


def test_a_bad_seq_member_from_another_lane_does_not_hold_that_lane() -> None:
    """A member of G with an unreadable guarantee-seq comes from another lane than G's,
    with G's next member behind it: neither is held or skipped; the bad one is parked and
    dead-lettered by the drain with its reason, G goes on in sequence."""
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    bad = msg(
        0,
        partition=1,
        value=b"G:x",
        headers=[(contract.GUARANTEE_ID, b"G"), (contract.SEQ, b"x"), *LOGICAL],
    )
    decisions = side.route(2, bad, member(1, "G", 1, 1))
    assert HELD not in decisions and SKIPPED not in decisions, decisions
    side.route(3, member(1, "G", 2, 0, final=True))
    drain_all(side, 4)
    assert_in_order(side, "G", [0, 1, 2])
    assert [(v, r) for v, r in side.dead_values] == [(b"G:x", "bad-seq")], side.dead_values
    assert "G" not in side.model.entries


# --- scenarios that held ---


def test_final_first_and_seq_0_last_from_three_lanes() -> None:
    side = Review(["0", "1"])
    side.route(1, member(0, "G", 3, 0, final=True))  # no entry: starts G in the room
    side.route(2, member(0, "G", 2, 1))
    side.route(3, member(0, "G", 1, 2))
    side.run_drain(4)
    assert side.delivered == [], "0 missing: nothing forwarded"
    side.route(5, member(1, "G", 0, 1))  # seq 0 last
    drain_all(side, 6)
    assert_in_order(side, "G", [0, 1, 2, 3])
    assert side.dead == [] and "G" not in side.model.entries


def test_the_aborted_batch_that_puts_the_group_in_the_room_then_its_replay() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), commit=False)  # readmits G, aborted
    side.route(3, member(1, "G", 1, 0))  # parked (G is admitted)
    side.run_drain(4)
    assert delivered_seqs(side, "G") == [0, 1]
    side.route(5, member(0, "G", 2, 1))  # the replay
    side.route(6, member(2, "G", 3, 0, final=True))
    drain_all(side, 7)
    assert_in_order(side, "G", [0, 1, 2, 3])
    assert side.dead == [] and "G" not in side.model.entries


def test_the_readmitting_batch_aborts_and_its_replay_comes_after_g_reopened() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 0), commit=False)  # not next: readmits G, aborted
    side.route(3, member(0, "G", 1, 1))  # parked, drained; G opens after the lease
    now = drain_all(side, 4)
    assert side.model.entries["G"].state == "open" and side.model.entries["G"].next == 2
    side.route(now, member(1, "G", 2, 0))  # the replay: next number, group's lane
    side.route(now + 1, member(2, "G", 3, 0, final=True))
    drain_all(side, now + 2)
    assert_in_order(side, "G", [0, 1, 2, 3])
    assert side.dead == [] and "G" not in side.model.entries


def test_a_straight_batch_aborts_twice_while_g_is_in_the_room() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(1, "G", 1, 0), member(2, "G", 2, 0), commit=False)  # straight
    side.route(3, member(0, "G", 4, 1, final=True))  # G in the room
    side.route(4, member(1, "G", 1, 0), member(2, "G", 2, 0), commit=False)  # replay aborts
    side.run_drain(5)
    assert delivered_seqs(side, "G") == [0], "the fence's batch is not settled"
    side.route(6, member(1, "G", 1, 0), member(2, "G", 2, 0), member(3, "G", 3, 0))
    drain_all(side, 7)
    assert_in_order(side, "G", [0, 1, 2, 3, 4])
    assert side.dead == [] and "G" not in side.model.entries


def test_a_straight_final_batch_aborts_and_is_replayed_in_two_batches() -> None:
    """The replay of an aborted [1, 2(final)] straight batch comes in two batches: the
    first moves `next` back (room.sequence: closing set), the second goes straight."""
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(1, "G", 1, 0), member(2, "G", 2, 0, final=True), commit=False)
    side.route(3, member(1, "G", 1, 0))
    side.route(4, member(2, "G", 2, 0, final=True))
    drain_all(side, 5)
    assert_in_order(side, "G", [0, 1, 2])
    assert side.dead == [] and "G" not in side.model.entries


def test_an_aborted_straight_final_with_a_retry_from_another_lane() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(1, "G", 1, 0), commit=False)  # straight, aborted
    side.route(3, member(0, "G", 1, 1, tag="retry"))  # a retry of 1: readmits G
    side.route(4, member(1, "G", 1, 0), member(2, "G", 2, 0, final=True))  # the replay
    drain_all(side, 5)
    assert_in_order(side, "G", [0, 1, 2])
    assert dead_seqs(side, "G") == [1] and dead_seqs(side, "G", "duplicate-seq") == [1]
    assert "G" not in side.model.entries


def test_duplicates_before_and_after_the_original() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0), member(1, "G", 1, 0))
    side.route(2, member(0, "G", 1, 1, tag="late"))  # after the original (straight)
    side.route(3, member(0, "G", 3, 2, tag="early"))  # before the original of 3
    side.route(4, member(1, "G", 3, 1), member(2, "G", 2, 1))
    side.route(5, member(2, "G", 4, 0, final=True))
    drain_all(side, 6)
    assert_in_order(side, "G", [0, 1, 2, 3, 4])
    assert dead_seqs(side, "G", "duplicate-seq") == [1, 3]
    assert len(side.dead) == 2 and "G" not in side.model.entries


def test_same_lane_retry_right_after_the_original_in_an_aborted_batch() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0), member(1, "G", 0, 0, tag="retry"), commit=False)
    side.route(2, member(0, "G", 0, 0), member(1, "G", 0, 0, tag="retry"))
    side.route(3, member(2, "G", 1, 0, final=True))
    drain_all(side, 4)
    assert_in_order(side, "G", [0, 1])
    assert dead_seqs(side, "G", "duplicate-seq") == [0] and len(side.dead) == 1


def test_two_groups_on_one_destination_do_not_interleave() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "H", 1, 1))  # H waits (no clean destination)
    side.route(3, member(0, "G", 2, 2, final=True), member(1, "H", 0, 1))
    side.route(4, member(1, "G", 1, 0), member(2, "H", 2, 1, final=True))
    drain_all(side, 5)
    assert_in_order(side, "G", [0, 1, 2])
    assert_in_order(side, "H", [0, 1, 2])
    assert side.dead == [] and side.model.entries == {}


def test_gap_policy_park_waits_then_completes() -> None:
    side = Review(["0"])
    side.drain.logical.gap_timeout_ms = 1_000
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), member(1, "G", 3, 1, final=True))
    now = 2
    for _ in range(5):
        side.run_drain(now := now + 1_000)
    assert delivered_seqs(side, "G") == [0] and len(gap_events(side)) == 1
    side.route(now, member(1, "G", 1, 0))
    drain_all(side, now + 1)
    assert_in_order(side, "G", [0, 1, 2, 3])
    assert side.dead == [] and "G" not in side.model.entries


def test_gap_policy_deliver_skips_and_dead_letters_the_late_member() -> None:
    side = Review(["0"])
    side.drain.logical.gap_timeout_ms, side.drain.logical.gap_policy = 1_000, "deliver"
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), member(1, "G", 3, 1))  # 1 missing, no final yet
    now = 2
    for _ in range(4):
        side.run_drain(now := now + 1_000)
    now = drain_all(side, now)
    assert delivered_seqs(side, "G") == [0, 2, 3]
    assert side.model.entries["G"].state == "open" and side.model.entries["G"].next == 4
    side.route(now, member(1, "G", 1, 0))  # late, from the group's own lane
    side.route(now + 1, member(2, "G", 4, 0, final=True))
    drain_all(side, now + 2)
    assert_in_order(side, "G", [0, 2, 3, 4])
    assert dead_seqs(side, "G", "duplicate-seq") == [1] and "G" not in side.model.entries


def test_the_drain_index_rebuilt_after_partial_drains() -> None:
    """Markers with `router-next-seq` filter the re-read records: 1, 2 drained, 4 waiting
    behind 3; the index is rebuilt (from offset 0 here: more than the low mark) twice,
    once before the table learned the marker's number."""
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), member(1, "G", 4, 1), member(2, "G", 1, 1))
    side.run_drain(3)
    assert delivered_seqs(side, "G") == [0, 1, 2]
    side.drain.reset()
    side.run_drain(4)
    side.run_drain(5)
    assert delivered_seqs(side, "G") == [0, 1, 2]
    side.route(6, member(1, "G", 3, 0))
    side.run_drain(7)
    side.drain.reset()
    now = drain_all(side, 8)
    assert delivered_seqs(side, "G") == [0, 1, 2, 3, 4]
    side.drain.reset()
    side.route(now, member(2, "G", 5, 0, final=True))
    drain_all(side, now + 1)
    assert_in_order(side, "G", [0, 1, 2, 3, 4, 5])
    assert side.dead == [] and "G" not in side.model.entries


def test_a_drain_batch_that_aborts_forwards_nothing_and_the_next_one_does() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), member(1, "G", 1, 1))
    aborted_drain(side, 3)
    assert delivered_seqs(side, "G") == [0]
    side.drain.reset()
    aborted_drain(side, 4)
    side.route(5, member(1, "G", 3, 0, final=True))
    aborted_drain(side, 6)
    drain_all(side, 7)
    assert_in_order(side, "G", [0, 1, 2, 3])
    assert side.dead == [] and "G" not in side.model.entries


def test_an_id_reused_after_a_straight_final() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0), member(1, "G", 1, 0, final=True))
    side.route(2, member(2, "G", 0, 0, tag="new"), member(3, "G", 1, 0, final=True, tag="new"))
    drain_all(side, 3)
    assert delivered_seqs(side, "G") == [0, 1, 0, 1] and side.dead == []
    assert side.model.entries == {}


def test_a_drain_committed_but_never_settled_then_a_new_owner() -> None:
    """The marker (`next=3`) is committed but the unit dies before settling: the table
    still says next=1. The new owner rebuilds its index from the room's low mark (kept
    at the pending marker) and neither forwards 1, 2 again nor takes a retry of 2."""
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), member(0, "G", 1, 2))
    out = unsettled_drain(side, 3)
    assert out.forwarded == 2 and delivered_seqs(side, "G") == [0, 1, 2]
    assert side.model.entries["G"].next == 1, "the table did not learn the marker"
    side.rebuild()
    side.route(4, member(1, "G", 2, 2, tag="retry"))
    side.run_drain(5)
    side.rebuild()
    side.route(6, member(1, "G", 3, 0, final=True))
    drain_all(side, 7)
    assert_in_order(side, "G", [0, 1, 2, 3])
    assert dead_seqs(side, "G", "duplicate-seq") == [2] and len(side.dead) == 1
    assert "G" not in side.model.entries


def test_a_new_owner_after_the_group_reopened_and_went_straight() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1), member(0, "G", 1, 2))
    now = drain_all(side, 3)
    assert side.model.entries["G"].state == "open"
    side.route(now, member(1, "G", 3, 0))  # straight
    side.rebuild()
    side.route(now + 1, member(1, "G", 4, 1), member(2, "G", 1, 1, tag="retry"))
    side.rebuild()
    side.route(now + 2, member(2, "G", 5, 0, final=True))
    drain_all(side, now + 3)
    assert_in_order(side, "G", [0, 1, 2, 3, 4, 5])
    assert dead_seqs(side, "G", "duplicate-seq") == [1] and "G" not in side.model.entries


def test_a_late_retry_after_the_release_does_not_hold_a_destination() -> None:
    side = Review(["0"])
    side.route(1, member(0, "G", 0, 0))
    side.route(2, member(0, "G", 2, 1, final=True), member(1, "G", 1, 1))
    now = drain_all(side, 3)
    assert_in_order(side, "G", [0, 1, 2])
    assert "G" not in side.model.entries
    side.route(now, member(0, "G", 1, 2, tag="retry"))  # late
    now = drain_all(side, now + 1)
    side.route(now, member(0, "H", 0, 3, final=True))
    drain_all(side, now + 1)
    assert dead_seqs(side, "G") == [1]
    assert delivered_seqs(side, "H") == [0], "H is not kept waiting for a phantom G"


# --- randomized: shuffled lanes, aborted batches, drains in between ---


def copies_of(side: Side, gid: str, seq: int) -> int:
    return side.copies[(gid, seq)]  # type: ignore[attr-defined,no-any-return]


@dataclass
class Lane:
    messages: list[FakeMessage] = field(default_factory=list)
    pos: int = 0  # committed position


def random_run(seed: int) -> tuple[Review, dict[str, int]]:
    """One to three groups of 1-6 members, spread over 1-3 lanes in a shuffled order (mostly
    in sequence on lane 0), with producer retries of middle members (on the final's lane,
    before the final: a retry after the group finished, or of seq 0 or of the final, is
    covered by the targeted tests above); batches of 1-3 messages per lane, a quarter of
    them aborted (replayed from the same offsets), drains in between, some aborted, and
    now and then the drain's index rebuilt."""
    rnd = random.Random(seed)
    side = Review([str(d) for d in range(rnd.choice([1, 2]))])
    nlanes = rnd.choice([1, 2, 3])
    lanes = [Lane() for _ in range(nlanes)]
    sizes = {g: rnd.randint(1, 6) for g in rnd.choice([["G"], ["G", "H"], ["G", "H", "K"]])}
    order: list[tuple[str, int, str, int]] = []  # (gid, seq, tag, lane)
    side.copies = {}  # type: ignore[attr-defined]
    for g, n in sizes.items():
        final_lane = 0 if rnd.random() < 0.5 else rnd.randrange(nlanes)
        for q in range(n):
            lane = 0 if rnd.random() < 0.5 else rnd.randrange(nlanes)
            side.copies[(g, q)] = 1  # type: ignore[attr-defined]
            if 0 < q < n - 1 and rnd.random() < 0.3:
                order.append((g, q, "dup", final_lane))  # a producer's retry
                side.copies[(g, q)] = 2  # type: ignore[attr-defined]
                lane = final_lane  # both copies come before the final
            order.append((g, q, "", final_lane if q == n - 1 else lane))
    # mostly in sequence, sometimes far off
    order.sort(key=lambda x: x[1] + rnd.random() * rnd.choice([0.5, 3]))
    for g, n in sizes.items():  # a retried member's copies come before its group's final
        final = next(x for x in order if x[0] == g and x[1] == n - 1)
        copied = [x for x in order if x[0] == g and copies_of(side, g, x[1]) > 1]
        rest = [x for x in order if x not in copied]
        at = rest.index(final)
        order = rest[:at] + copied + rest[at:]
    for g, q, tag, lane in order:
        ln = lanes[lane]
        ln.messages.append(member(len(ln.messages), g, q, lane, final=q == sizes[g] - 1, tag=tag))
    now = 1
    while any(ln.pos < len(ln.messages) for ln in lanes):
        now += rnd.randint(1, 3_000)
        if rnd.random() < 0.05:
            side.rebuild()  # the drain's index is rebuilt from the room's low marks
        if rnd.random() < 0.3:
            (aborted_drain if rnd.random() < 0.2 else Review.run_drain)(side, now)
            continue
        take: list[FakeMessage] = []
        for ln in lanes:
            if ln.pos < len(ln.messages) and rnd.random() < 0.7:
                take += ln.messages[ln.pos : ln.pos + rnd.randint(1, 3)]
        if not take:
            continue
        commit = rnd.random() >= 0.25
        decisions = side.route(now, *take, commit=commit)
        assert not {d for d in decisions if d.startswith("!") and d != "!w"}, decisions
        if commit:
            for m in take:
                lanes[m.partition()].pos = max(lanes[m.partition()].pos, m.offset() + 1)
    drain_all(side, now + 1, rounds=8)
    return side, sizes


@pytest.mark.parametrize("seed", range(500))
def test_random_lanes_aborts_and_drains(seed: int) -> None:
    side, sizes = random_run(seed)
    for g, n in sizes.items():
        assert_in_order(side, g, list(range(n)))
    dead: dict[tuple[str, int], int] = {}
    for v, reason in side.dead_values:
        assert reason == "duplicate-seq", side.dead_values
        dead[(gid_of(v), seq_of(v))] = dead.get((gid_of(v), seq_of(v)), 0) + 1
    copies: dict[tuple[str, int], int] = side.copies  # type: ignore[attr-defined]
    assert dead == {k: n - 1 for k, n in copies.items() if n > 1}
    assert side.model.entries == {}, side.model.entries
