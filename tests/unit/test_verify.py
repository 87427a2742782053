"""The verifier must see every kind of broken guarantee (and nothing else)."""

from __future__ import annotations

from ops.harness.verify import Seen, Sent, verify


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
    assert r.violations(interleaving_allowed=False) == []


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
    assert r.unexpected == 1
    assert r.reordered == 1
    assert r.split_groups == 1
    assert r.interleaved == 1
    assert r.groups_complete == 0
    v = r.violations(interleaving_allowed=True)
    assert {x.split("=")[0] for x in v} == {
        "lost",
        "duplicated",
        "unexpected",
        "reordered",
        "split_groups",
    }
    assert any(x.startswith("interleaved") for x in r.violations(interleaving_allowed=False))


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
