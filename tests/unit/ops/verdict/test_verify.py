"""The verifier must see every kind of broken guarantee (and nothing else), and the
capacity rule must allow exactly the interleavings made while every other destination of
the side was occupied."""

from __future__ import annotations

import random

from ops.harness.verdict.capacity import (
    RELEASE_SLACK_MS,
    Disturbance,
    Placed,
    judge_side,
    release_by,
)
from ops.harness.verdict.intervals import gaps, intersect, merge
from ops.harness.verdict.records import Seen, Sent
from ops.harness.verdict.sides import CapacitySpec
from ops.harness.verdict.verify import verify


def sent_group(g: str, n: int) -> list[Sent]:
    return [Sent(f"{g}{i}", g, i, i == n - 1) for i in range(n)]


def seen(queue: str, offset: int, s: Sent) -> Seen:
    return Seen(queue, offset, s.event_id, s.group, s.seq, s.final)


def test_a_clean_run_has_no_violation() -> None:
    a, b, o = sent_group("A", 3), sent_group("B", 2), [Sent("o1", None, 0, False)]
    got = [seen("q1", i, s) for i, s in enumerate(a + o)] + [
        seen("q2", i, s) for i, s in enumerate(b)
    ]
    r = verify(a + b + o, got)
    assert (r.sent, r.received, r.groups_sent, r.groups_complete) == (6, 6, 2, 2)
    assert r.violations() == []


def test_each_violation_is_counted() -> None:
    a, b = sent_group("A", 3), sent_group("B", 3)
    o = [Sent("o1", None, 0, False), Sent("o2", None, 0, False)]
    got = [
        seen("q1", 0, a[0]),
        seen("q1", 1, o[0]),  # inside A's open path: interleaved
        seen("q1", 2, a[2]),
        seen("q2", 0, a[1]),  # A split over q1 and q2
        seen("q3", 0, b[1]),
        seen("q3", 1, b[0]),  # B reordered
        seen("q3", 2, b[2]),
        seen("q3", 3, b[2]),  # duplicated
        Seen("q3", 4, "stranger", None, 0, False),
    ]
    r = verify(a + b + o, got)
    assert r.lost == 1 and r.lost_examples == ["o2"]
    assert r.duplicated == 1
    assert r.duplicate_examples == [
        "B2: received q3@2 (appended None), q3@3 (appended None); transfer topic not read"
    ]
    up = verify(a + b + o, got, forwarded=[seen("transfer[0]", 7, b[2])])
    assert up.duplicate_examples[0].endswith("transfer topic transfer[0]@7 (appended None)")
    assert r.unexpected == 1
    assert r.reordered == 1
    assert r.split_groups == 1
    assert r.interleaved == 1
    assert r.groups_complete == 0
    v = r.violations()
    assert {x.split("=")[0] for x in v} == {
        "lost",
        "duplicated",
        "unexpected",
        "reordered",
        "split_groups",
        "interleaved",  # no append times: the capacity rule cannot allow it
    }


def test_a_redelivered_copy_counts_only_as_a_duplicate() -> None:
    sent = [Sent("a", "g", 0, False), Sent("b", "g", 1, True), Sent("x", None, 0, False)]
    got = [
        Seen("q", 0, "a", "g", 0, False),
        Seen("q", 1, "b", "g", 1, True),
        Seen("q", 2, "a", "g", 0, False),  # a late copy of line 0
        Seen("q", 3, "x", None, 0, False),
    ]
    r = verify(sent, got)
    assert (r.duplicated, r.reordered, r.interleaved, r.groups_complete) == (1, 0, 0, 1)


# ------------------------------------------------------------------ the capacity rule


def p(
    dest: str, offset: int, ev: str, group: str | None, final: bool, frm: int, app: int
) -> Placed:
    return Placed(dest, offset, ev, group, final, frm, app)


def group_on(dest: str, g: str, start: int, end: int | None, base: int = 0) -> list[Placed]:
    """Group g alone on `dest` from offset `base`: its first record decided from `start`,
    its final appended at `end` (None: no final)."""
    out = [p(dest, base, f"{g}0", g, False, start, start + 1)]
    if end is not None:
        out.append(p(dest, base + 1, f"{g}1", g, True, end - 1, end))
    return out


def interleaved_ordinary(frm: int, app: int) -> list[Placed]:
    """Group g open on A from 0 to 1000, an ordinary record placed inside its span."""
    return [
        p("A", 0, "g0", "g", False, 0, 1),
        p("A", 1, "o", None, False, frm, app),
        p("A", 2, "g1", "g", True, 999, 1000),
    ]


def counts(recs: list[Placed], dests: list[str], slack: int = 0) -> tuple[int, int, int]:
    r = judge_side("receive", recs, dests, slack)
    return r.interleaved, r.allowed, r.disallowed


def test_no_interleaving_nothing_to_judge() -> None:
    recs = [
        *group_on("A", "g", 0, 100),
        p("A", 2, "o", None, False, 150, 160),  # after g's final
        *group_on("B", "h", 10, 50),
    ]
    r = judge_side("receive", recs, ["A", "B"], 0)
    assert (r.interleaved, r.allowed, r.disallowed, r.records, r.destinations) == (0, 0, 0, 5, 2)


def test_interleaving_while_another_destination_idles_is_disallowed() -> None:
    recs = [*interleaved_ordinary(200, 300), *group_on("B", "h", 0, 100)]  # B free after 100
    r = judge_side("receive", recs, ["A", "B"], 0)
    assert (r.interleaved, r.allowed, r.disallowed) == (1, 0, 1)
    assert r.placements == r.placements_disallowed == 1
    (example,) = r.examples
    assert example.startswith("A@1 ordinary o entered group g's span")
    assert "+100 ms; free (ms into the window): B +0..+100 (free since -100)" in example
    # every interleaving, listed, with its append time (UTC) and its group's first record's
    assert r.inside == ["A@1 (00:00:00.300) o (ordinary) inside g (from A@0 (00:00:00.001))"]


def test_interleaving_while_every_other_destination_is_occupied_is_allowed() -> None:
    busy_together = [*group_on("B", "h", 0, 250), *group_on("C", "k", 220, 900)]
    assert counts([*interleaved_ordinary(200, 300), *busy_together], ["A", "B", "C"]) == (1, 1, 0)
    # Each occupied during the window, but never both at the same instant: disallowed.
    apart = [*group_on("B", "h", 0, 240), *group_on("C", "k", 260, 900)]
    r = judge_side("receive", [*interleaved_ordinary(200, 300), *apart], ["A", "B", "C"], 0)
    assert r.disallowed == 1
    assert "B +41..+100; C +0..+59" in r.examples[0]


def test_a_group_without_final_occupies_from_its_first_decision_on() -> None:
    assert counts(
        [*interleaved_ordinary(200, 300), *group_on("B", "h", 250, None)], ["A", "B"]
    ) == (
        1,
        1,
        0,
    )
    assert counts(
        [*interleaved_ordinary(200, 300), *group_on("B", "h", 301, None)], ["A", "B"]
    ) == (
        1,
        0,
        1,
    )


def test_ties_on_the_same_millisecond_count_as_overlap() -> None:
    # B's final appended at 200, the record's window starts at 200: both at ms 200.
    assert (
        counts([*interleaved_ordinary(200, 300), *group_on("B", "h", 0, 200)], ["A", "B"])[1] == 1
    )
    # The window ends at 300, C's group is decided from 300.
    assert (
        counts([*interleaved_ordinary(200, 300), *group_on("C", "k", 300, None)], ["A", "C"])[1]
        == 1
    )
    # One millisecond apart is apart.
    assert (
        counts([*interleaved_ordinary(200, 300), *group_on("C", "k", 301, None)], ["A", "C"])[2]
        == 1
    )
    # Two groups on B, one decided the millisecond after the other's final: no instant free.
    recs = [
        *interleaved_ordinary(200, 300),
        *group_on("B", "h", 0, 250),
        *group_on("B", "k", 251, None, base=2),
    ]
    assert counts(recs, ["A", "B"]) == (1, 1, 0)


def test_a_destination_that_never_received_anything_disallows_every_interleaving() -> None:
    recs = [*interleaved_ordinary(200, 300), *group_on("B", "h", 0, None)]
    assert counts(recs, ["A", "B"]) == (1, 1, 0)
    r = judge_side("receive", recs, ["A", "B", "empty"], 0)
    assert r.disallowed == 1 and r.destinations == 3
    assert "empty +0..+100 (never occupied)" in r.examples[0]


def test_the_release_slack_extends_occupancy_by_exactly_its_value() -> None:
    recs = [*interleaved_ordinary(200, 300), *group_on("B", "h", 0, 150)]  # B free from 151
    assert counts(recs, ["A", "B"], slack=49) == (1, 0, 1)
    assert counts(recs, ["A", "B"], slack=50) == (1, 1, 0)
    assert judge_side("receive", recs, ["A", "B"], 50).release_slack_ms == 50
    assert judge_side("receive", recs, ["A", "B"]).release_slack_ms == RELEASE_SLACK_MS


def test_a_disturbance_while_a_release_is_due_holds_it_up_to_its_end_plus_recovery() -> None:
    recs = [*interleaved_ordinary(200, 300), *group_on("B", "h", 0, 150)]  # B free from 151
    kill = Disturbance(160, 170, 40, "receive", "SIGKILL")  # B's release due until 160
    r = judge_side("receive", recs, ["A", "B"], 10, [kill])
    assert (r.interleaved, r.allowed, r.disallowed, r.held_up) == (1, 1, 0, 1)
    assert "1 releases held up" in r.line()
    # Begun after the release was due, on the other side, or over before the final: no.
    for other in (
        Disturbance(161, 170, 40, "receive"),
        Disturbance(160, 170, 40, "send"),
        Disturbance(100, 149, 400, None),
    ):
        r = judge_side("receive", recs, ["A", "B"], 10, [other])
        assert (r.disallowed, r.held_up) == (1, 0), other
    # Still bounded: a window past the end of the recovery is disallowed.
    late = [*interleaved_ordinary(211, 300), *group_on("B", "h", 0, 150)]
    assert judge_side("receive", late, ["A", "B"], 10, [kill]).disallowed == 1


def test_disturbances_that_follow_each_other_add_up() -> None:
    chain = [Disturbance(110, 120, 50, None), Disturbance(160, 200, 30, None)]
    assert release_by(100, 20, chain) == (230, True)  # due 120, then 170, then 230
    assert release_by(100, 20, chain[1:]) == (120, False)  # begins after 120: no effect
    assert release_by(100, 20, []) == (120, False)


def test_ordinary_records_decided_before_a_group_took_their_destination() -> None:
    """The lease race the table fences: o decided for A while A was free, g opened on A
    (every other destination busy), o appended after g's first record. o's window holds
    g's decision, when every other destination was busy: allowed. Had another destination
    been free through o's window, disallowed."""
    recs = [
        p("A", 0, "g0", "g", False, 120, 130),
        p("A", 1, "o", None, False, 100, 140),
        p("A", 2, "g1", "g", True, 500, 510),
        *group_on("B", "h", 0, 1000),
    ]
    assert counts(recs, ["A", "B"]) == (1, 1, 0)
    assert counts(recs, ["A", "B", "C"]) == (1, 0, 1)


def test_later_messages_of_a_group_follow_the_placement_that_made_the_overlap() -> None:
    # g opens on A; h is placed on A while B is busy (allowed); B frees; h's later
    # messages must still go to A (same receiver): allowed, as their group's placement.
    recs = [
        p("A", 0, "g0", "g", False, 0, 1),
        p("A", 1, "h0", "h", False, 100, 110),  # placement: B busy until 200
        p("A", 2, "h1", "h", False, 400, 410),  # B free by then, but h is pinned to A
        p("A", 3, "g1", "g", True, 500, 510),  # g's final, inside h's span
        p("A", 4, "h2", "h", True, 600, 610),  # g closed: not interleaved
        *group_on("B", "b", 0, 200),
    ]
    r = judge_side("receive", recs, ["A", "B"], 0)
    assert (r.interleaved, r.allowed, r.placements) == (3, 3, 1)
    # h placed while B was free: the placement, h's later line and g's final inside h's
    # span are all disallowed (the overlap h's placement made).
    recs[1] = p("A", 1, "h0", "h", False, 300, 310)
    r = judge_side("receive", recs, ["A", "B"], 0)
    assert (r.interleaved, r.disallowed, r.placements_disallowed) == (3, 3, 1)
    assert r.examples[0].startswith("A@1 first of group h entered group g's span")
    # A later message of the older group inside a newer group's span follows the newer
    # group's placement only: g's own placement (before h existed) cannot excuse it.
    recs = [
        p("A", 0, "g0", "g", False, 0, 1),
        p("A", 1, "h0", "h", False, 100, 110),  # allowed: B busy
        p("A", 2, "k0", "k", False, 300, 310),  # disallowed: B free
        p("A", 3, "g1", "g", True, 400, 410),  # inside h's (allowed) and k's (disallowed)
        *group_on("B", "b", 0, 200),
    ]
    r = judge_side("receive", recs, ["A", "B"], 0)
    assert (r.interleaved, r.allowed, r.disallowed) == (3, 1, 2)


def test_interleaving_judged_on_both_sides_with_decision_windows_from_upstream() -> None:
    """Send side: a window starts at the sender's create time; receive side: at the
    record's append time on the transfer topic."""
    g, h, k = sent_group("g", 2), sent_group("h", 1), sent_group("k", 2)
    o = Sent("o", None, 0, False)

    def s(dest: str, off: int, x: Sent, created: int, app: int) -> Seen:
        return Seen(dest, off, x.event_id, x.group, x.seq, x.final, None, app, created)

    forwarded = [
        s("transfer[0]", 0, g[0], 0, 10),
        s("transfer[0]", 1, o, 100, 300),  # inside g's span: placed in [100, 300]
        s("transfer[0]", 2, g[1], 1, 305),
        s("transfer[0]", 3, h[0], 0, 310),
        s("transfer[1]", 0, k[0], 150, 160),  # transfer[1] occupied from 150 to 900
        s("transfer[1]", 1, k[1], 151, 900),
    ]
    received = [
        s("q1", 0, g[0], 0, 30),
        s("q1", 1, o, 100, 320),  # inside g's span: placed in [300, 320]
        s("q1", 2, g[1], 1, 500),
        s("q2", 0, h[0], 0, 315),  # h, a one-message group: q2 occupied over [310, 315]
        s("q2", 1, k[0], 150, 950),
        s("q2", 2, k[1], 151, 960),
    ]
    cap = CapacitySpec(("transfer[0]", "transfer[1]"), ("q1", "q2"), release_slack_ms=0)
    r = verify([*g, o, *h, *k], received, forwarded=forwarded, capacity=cap)
    assert r.send is not None and r.receive is not None
    assert (r.send.interleaved, r.send.allowed) == (1, 1)
    assert (r.receive.interleaved, r.receive.allowed) == (1, 1)
    assert r.violations() == []
    # Created after k's final reached transfer[1]: free all through its send-side window.
    forwarded[1] = s("transfer[0]", 1, o, 901, 920)
    received[1] = s("q1", 1, o, 901, 960)
    r = verify([*g, o, *h, *k], received, forwarded=forwarded, capacity=cap)
    assert r.send is not None and r.send.disallowed == 1
    # On q1 its window is [920, 960] (from its append upstream): q2 is occupied by k
    # from 160 (k's first appended upstream) to 960 (k's final on q2), so it is allowed.
    assert r.receive is not None and r.receive.disallowed == 0
    assert r.violations() == ["send side: 1 disallowed interleavings"]


def test_a_group_is_in_charge_from_a_member_that_never_reached_the_destination() -> None:
    """A group's first member expired (or dead-lettered) at the hop is routed all the same,
    so the table has its destination busy before anything of the group is on it."""
    # On B, h's first record on the queue is decided from 310; its member routed at 150
    # never arrived there. The ordinary record on A is placed in [200, 300].
    recs = [*interleaved_ordinary(200, 300), *group_on("B", "h", 310, 900)]
    assert judge_side("receive", recs, ["A", "B"], 0).disallowed == 1
    assert judge_side("receive", recs, ["A", "B"], 0, (), {"h": 150}).disallowed == 0
    # Only ever earlier: an opened_from after the first record changes nothing.
    late = judge_side("receive", recs, ["A", "B"], 0, (), {"h": 400})
    assert late.disallowed == 1


def test_both_sides_start_a_group_at_its_earliest_member() -> None:
    """Send side: a sent member's create time (`Sent.created_ms`), even if it expired at
    the send unit; receive side: the earliest member on the transfer topic, even if it
    expired at the receive unit."""
    o = Sent("o", None, 0, False, created_ms=200)
    gone = Sent("k0", "k", 0, False, expires=True, created_ms=150)  # expired at the send unit
    k1, k2 = Sent("k1", "k", 1, False, created_ms=260), Sent("k2", "k", 2, True, created_ms=261)
    g0, g1 = Sent("g0", "g", 0, False, created_ms=0), Sent("g1", "g", 1, True, created_ms=1)

    def s(dest: str, off: int, x: Sent, app: int) -> Seen:
        return Seen(dest, off, x.event_id, x.group, x.seq, x.final, None, app, x.created_ms)

    forwarded = [
        s("transfer[0]", 0, g0, 10),
        s("transfer[0]", 1, o, 230),  # inside g's span, placed in [200, 230]
        s("transfer[0]", 2, g1, 1000),
        s("transfer[1]", 0, k1, 270),  # k in charge of transfer[1] from 150, not 260
        s("transfer[1]", 1, k2, 900),
    ]
    cap = CapacitySpec(("transfer[0]", "transfer[1]"), ("q1", "q2"), release_slack_ms=0)
    sent = [g0, g1, o, gone, k1, k2]
    r = verify(sent, [], forwarded=forwarded, capacity=cap)
    assert r.send is not None and (r.send.interleaved, r.send.disallowed) == (1, 0)
    # Without the expired member's create time, the judge knows k only from 260.
    unknown = Sent("k0", "k", 0, False)
    r = verify([g0, g1, o, unknown, k1, k2], [], forwarded=forwarded, capacity=cap)
    assert r.send is not None and r.send.disallowed == 1


def test_interval_helpers() -> None:
    assert merge([(5, 9), (1, 3), (4, 4), (11, 12)]) == [(1, 9), (11, 12)]
    assert intersect([(0, 10), (20, 30)], [(5, 25)]) == [(5, 10), (20, 25)]
    assert gaps([(5, 9), (12, 20)], 0, 14) == [(0, 4), (10, 11)]
    assert gaps([], 3, 4) == [(3, 4)]
    assert gaps([(0, 100)], 3, 4) == []


def test_a_chaos_sized_side_is_judged_whole() -> None:
    """100,000 records on 12 destinations with thousands of interleavings are judged in one
    pass (sorting and sweeping, no pairwise comparison of records). No time bound here: a
    timed assertion fails on a loaded machine; the chaos runs show the judge's time."""
    rng = random.Random(3)
    dests = [f"q{i}" for i in range(12)]
    recs: list[Placed] = []
    offsets = dict.fromkeys(dests, 0)
    now = 0
    open_on: dict[str, tuple[str, int]] = {}
    for n in range(100_000):
        now += rng.randint(0, 3)
        d = rng.choice(dests)
        if d in open_on and rng.random() < 0.9:
            g, seq = open_on[d]
            final = seq >= rng.randint(1, 30)
            recs.append(p(d, offsets[d], f"e{n}", g, final, now - 5, now))
            if final:
                del open_on[d]
            else:
                open_on[d] = (g, seq + 1)
        elif rng.random() < 0.5:
            g = f"g{n}"
            recs.append(p(d, offsets[d], f"e{n}", g, False, now - 5, now))
            open_on[d] = (g, 1)
        else:
            recs.append(p(d, offsets[d], f"e{n}", None, False, now - 5, now))
        offsets[d] += 1
    r = judge_side("receive", recs, dests, 0)
    assert r.records == 100_000 and r.interleaved > 1000
    assert r.interleaved == r.allowed + r.disallowed


def test_a_copy_that_waited_for_its_queue_occupies_it_until_its_release() -> None:
    """A multicast copy decided while its queue B was in charge of group h waited in the
    room; admitted once h was released, B is in charge of the copies (load 1) until the
    drain's release, so an ordinary record placed in g's span on A meanwhile is allowed.
    A copy that went straight to a free B only fences new groups: the same ordinary
    record is then disallowed."""
    waited = [
        *group_on("B", "h", 0, 150),
        Placed("B", 2, "m~B", None, False, 100, 400, copy=True),  # window meets h's span
    ]
    assert counts([*interleaved_ordinary(200, 300), *waited], ["A", "B"]) == (1, 1, 0)
    straight = [
        *group_on("B", "h", 0, 150),
        Placed("B", 2, "m~B", None, False, 180, 400, copy=True),  # B free at its decision
    ]
    assert counts([*interleaved_ordinary(200, 300), *straight], ["A", "B"]) == (1, 0, 1)
    # A copy queued behind a copy that waited waits too.
    chained = [*waited, Placed("B", 3, "n~B", None, False, 390, 700, copy=True)]
    assert counts([*interleaved_ordinary(600, 650), *chained], ["A", "B"]) == (1, 1, 0)
