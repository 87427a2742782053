"""The verdict over priority bands (ops/harness/verdict/bands.py, verify.py, capacity.py): a
destination is all its band topics. Order and completeness per band topic (a group on two
band topics is split), interleavings over the band topics merged by append time (ties
within a millisecond resolved leniently), every record on its priority's band (a group's
on its first member's); and the workload's priority share (ops/harness/traffic/workload.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ops.harness.scenarios.chaos_result import ChaosResult, summary
from ops.harness.traffic.workload import WorkloadSpec, plan
from ops.harness.verdict.bands import merged
from ops.harness.verdict.capacity import Placed, judge_side
from ops.harness.verdict.records import Seen, Sent
from ops.harness.verdict.sides import CapacitySpec
from ops.harness.verdict.verify import Report, verify
from router.contract.priority import band_of

BANDS = 3
Q, R = "t.recv.0", "t.recv.1"


def group(g: str, n: int, first: int | None, later: int | None = None) -> list[Sent]:
    """Group g of n members: the first with priority `first`, the others with `later`."""
    return [
        Sent(f"{g}{i}", g, i, i == n - 1, priority=first if i == 0 else later) for i in range(n)
    ]


def on(queue: str, band: int, offset: int, s: Sent, at: int) -> Seen:
    """`s` on band `band` of `queue` at `offset`, appended at `at` ms (created just before)."""
    return Seen(queue, offset, s.event_id, s.group, s.seq, s.final, None, at, at - 5, band)


def judged(sent: list[Sent], seen: list[Seen], queues: tuple[str, ...] = (Q, R)) -> Report:
    """`verify` with both sides: the transfer topic holds the same records, on the same
    bands, each appended 2 ms before its receive queue copy."""
    upstream = sorted(seen, key=lambda r: r.append_ms or 0)
    forwarded = [
        replace(r, queue="transfer[0]", offset=i, append_ms=(r.append_ms or 0) - 2)
        for i, r in enumerate(upstream)
    ]
    capacity = CapacitySpec(("transfer[0]",), queues, 0)
    return verify(sent, seen, forwarded=forwarded, capacity=capacity, bands=BANDS)


def test_a_clean_run_over_bands_passes_and_says_where_the_priorities_landed() -> None:
    a = group("A", 3, first=9, later=0)  # band 2, its later members' priorities ignored
    b = group("B", 2, first=None, later=None)  # band 0
    o = [Sent("o1", None, 0, False, priority=5), Sent("o2", None, 0, False)]
    seen = [
        on(Q, 2, 0, a[0], 100),
        on(Q, 2, 1, a[1], 110),
        on(Q, 2, 2, a[2], 120),
        on(Q, 1, 0, o[0], 130),  # after A's final, on another band of the same queue
        on(Q, 0, 0, o[1], 140),
        on(R, 0, 0, b[0], 100),
        on(R, 0, 1, b[1], 150),
    ]
    r = judged(a + b + o, seen)
    assert r.violations() == [], r.violations()
    assert (r.groups_complete, r.split_groups, r.interleaved) == (2, 0, 0)
    assert r.bands is not None
    assert (r.bands.prioritised, r.bands.prioritised_groups) == (4, 1)  # a: 1 + 2 later, o1
    assert r.bands.landed == Counter({2: 3, 1: 1})  # A's three members, o1
    assert r.bands.violations() == []
    assert r.send is not None and r.receive is not None
    assert (r.send.disallowed, r.receive.disallowed) == (0, 0)
    text = "\n".join(summary(ChaosResult(r)))
    assert "with a priority" in text and "band 0 0, band 1 1, band 2 3" in text
    assert "wrong band" in text and "RESULT: PASS" in text


def test_a_group_split_over_two_band_topics_of_one_queue_is_caught() -> None:
    a = group("A", 3, first=9, later=0)
    seen = [
        on(Q, 2, 0, a[0], 100),
        on(Q, 0, 0, a[1], 110),  # its later member's own band: the router must ignore it
        on(Q, 2, 1, a[2], 120),
    ]
    r = judged(a, seen)
    assert r.split_groups == 1 and r.groups_complete == 0
    assert r.split_examples == [f"A on ['{Q}', '{Q}.p2']"]
    assert r.bands is not None and r.bands.split == 1
    assert r.bands.wrong == Counter({"receive": 1, "send": 1})  # A1 on band 0
    assert (
        "A1 on t.recv.0@0 (receive side): band 0, its group's first member's priority 9"
        in (r.bands.examples[0])
    )
    v = r.violations()
    assert "split_groups=1" in v and "split over bands=1" in v
    assert "receive side: wrong band=1" in v and "send side: wrong band=1" in v
    assert "RESULT: FAIL" in summary(ChaosResult(r))[-1]


def test_reordering_is_judged_per_band_topic_not_across_offsets_of_two_topics() -> None:
    a, b = group("A", 2, first=8), group("B", 2, first=None)
    seen = [  # offsets of two band topics are not comparable: no reordering here
        on(Q, 2, 5, a[0], 100),
        on(Q, 2, 6, a[1], 110),
        on(Q, 0, 0, b[0], 120),
        on(Q, 0, 1, b[1], 130),
    ]
    assert judged(a + b, seen).violations() == []
    seen[0], seen[1] = on(Q, 2, 6, a[0], 110), on(Q, 2, 5, a[1], 100)
    r = judged(a + b, seen)
    assert r.reordered == 1 and r.reorder_examples == [f"A: 0 after 1 on {Q}.p2"]


def test_an_ordinary_record_of_band_0_inside_a_band_2_groups_span_is_interleaved() -> None:
    a = group("A", 3, first=9)
    h = group("H", 2, first=None)  # R busy only until 100: R was free when o came
    o = Sent("o", None, 0, False)
    seen = [
        on(Q, 2, 0, a[0], 100),
        on(Q, 2, 1, a[1], 200),
        on(Q, 0, 0, o, 250),  # band 0 of the same queue, while A is open on band 2
        on(Q, 2, 2, a[2], 300),
        on(R, 0, 0, h[0], 50),
        on(R, 0, 1, h[1], 100),
    ]
    r = judged(a + h + [o], seen)
    assert r.interleaved == 1
    assert r.receive is not None and r.receive.disallowed == 1
    assert r.receive.examples[0].startswith(f"{Q}@0 ordinary o entered group A's span")
    assert "receive side: 1 disallowed interleavings" in r.violations()
    assert r.split_groups == 0 and r.reordered == 0  # only the interleaving is wrong


def test_a_group_in_the_wrong_band_is_caught_on_both_sides() -> None:
    a = group("A", 2, first=2, later=9)  # band 0: the later member's 9 must not count
    o = Sent("o", None, 0, False, priority=7)  # band 2
    seen = [on(Q, 2, 0, a[0], 100), on(Q, 2, 1, a[1], 110), on(R, 1, 0, o, 100)]
    r = judged([*a, o], seen)
    assert r.bands is not None
    assert r.bands.wrong == Counter({"receive": 3, "send": 3}) and r.bands.wrong_groups == 1
    assert r.bands.split == 0 and r.split_groups == 0  # whole, on one band topic: wrong band
    assert "o on t.recv.1.p1@0 (receive side): band 1, priority 7 asks for band 2" in (
        r.bands.examples
    )


def test_a_multicast_copy_is_expected_on_its_messages_band_on_every_queue() -> None:
    m = Sent("m", None, 0, False, (Q, R), priority=4)  # band 1
    good = [on(Q, 1, 0, m, 100), on(R, 1, 0, m, 100)]
    assert judged([m], good).violations() == []
    r = judged([m], [on(Q, 1, 0, m, 100), on(R, 0, 0, m, 100)])
    assert r.bands is not None and r.bands.wrong["receive"] == 1


# ------------------------------------------------------------------ merging band topics


def p(band: int, offset: int, ev: str, g: str | None, final: bool, at: int) -> Placed:
    return Placed(Q, offset, ev, g, final, at - 5, at, band=band)


def test_band_topics_merge_by_append_time_each_in_offset_order() -> None:
    recs = [
        p(0, 0, "x", None, False, 10),
        p(2, 0, "g0", "g", False, 20),
        p(0, 1, "y", None, False, 30),
        p(2, 1, "g1", "g", True, 25),
        p(0, 2, "z", None, False, 5),  # a clock step back: still after y on its topic
    ]
    assert [r.event_id for r in merged(recs)] == ["x", "g0", "g1", "y", "z"]
    assert [
        r.offset for r in merged([p(0, 2, "b", None, False, 1), p(0, 1, "a", None, False, 9)])
    ] == [
        1,
        2,
    ]  # one band topic alone: offset order, append times not used


def test_a_tie_in_one_millisecond_is_resolved_leniently() -> None:
    """Band 2's group g ends at 50 ms, band 0's ordinary o and group h's first are at
    50 ms too: no order of the tie is known, so g's final goes first and h's first last,
    and nothing counts as interleaved."""
    recs = [
        p(0, 0, "o", None, False, 50),
        p(0, 1, "h0", "h", False, 50),
        p(0, 2, "h1", "h", True, 60),
        p(2, 0, "g0", "g", False, 40),
        p(2, 1, "g1", "g", False, 50),
        p(2, 2, "g2", "g", True, 50),
        p(1, 0, "k0", "k", False, 50),  # k opens at 50 too: after everything else
        p(1, 1, "k1", "k", True, 70),
    ]
    order = [r.event_id for r in merged(recs)]
    assert order == ["g0", "g1", "g2", "o", "h0", "k0", "h1", "k1"]
    r = judge_side("receive", recs, [Q, R], 0)
    # h and k open in the same ms on two bands: one is inside the other's span whatever
    # the order (k0, and h1 after it), with R free: disallowed.
    assert (r.interleaved, r.disallowed) == (2, 2)
    lone = [x for x in recs if x.group != "k"]
    assert judge_side("receive", lone, [Q, R], 0).interleaved == 0


# ------------------------------------------------------------------ the workload's share


def spec(**kw: object) -> WorkloadSpec:
    base: dict[str, object] = {"run_id": "t", "senders": 2, "messages": 4000, "max_group": 10}
    return WorkloadSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_the_priority_share_is_what_was_asked_and_leaves_the_plan_as_it_was() -> None:
    plain = [s for i in range(2) for s, _ in plan(spec(), i)]
    pairs = [x for i in range(2) for x in plan(spec(priority_fraction=0.1), i)]
    strip = [(s.event_id, s.group, s.seq, s.final) for s, _ in pairs]
    assert strip == [(s.event_id, s.group, s.seq, s.final) for s in plain]
    assert all(s.priority is None for s in plain)
    ordinary = [s for s, _ in pairs if s.group is None]
    assert 0.07 < sum(s.priority is not None for s in ordinary) / len(ordinary) < 0.13
    firsts = {s.group: s.priority for s, _ in pairs if s.group is not None and s.seq == 0}
    ranked = sum(v is not None for v in firsts.values())
    assert 0.05 < ranked / len(firsts) < 0.15
    for s, ctx in pairs:
        headers = [v for k, v in ctx["headers"] if k == "message-priority"]
        assert headers == ([] if s.priority is None else [str(s.priority).encode()])
        if s.group is not None and s.seq > 0:  # a priority only in a ranked group, not its first's
            first = firsts[s.group]
            assert s.priority is None if first is None else s.priority not in (None, first)
    values = {s.priority for s, _ in pairs if s.priority is not None}
    assert values == set(range(10))
    moved = later = 0
    for s, _ in pairs:
        if s.group is not None and s.seq > 0 and s.priority is not None:
            later += 1
            moved += band_of(s.priority, 3) != band_of(firsts[s.group], 3)
    assert moved > later / 2  # most of them would change the group's band
