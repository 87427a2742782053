"""Whole groups and logical order in the chaos workload (ops/harness/traffic/workload.py) and
their verdict (ops/harness/verdict/features.py): a whole group released before its final
was sent, or with something between its records, and a logical group received out of
sequence are violations; a logical group must have been sent out of sequence to count as
scattered. Also the chaos summary's fault kinds: one asked for that never happened fails
the run."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ops.harness.scenarios.chaos_result import ChaosResult, summary
from ops.harness.traffic.workload import WorkloadSpec, plan
from ops.harness.verdict.features import judge_features
from ops.harness.verdict.records import Seen, Sent
from ops.harness.verdict.verify import Report, verify
from router.contract import headers as h


def whole(g: str, n: int, created: int = 1000) -> list[Sent]:
    """A whole group, its members created 10 ms apart from `created`."""
    return [
        Sent(f"{g}{i}", g, i, i == n - 1, whole=True, created_ms=created + 10 * i) for i in range(n)
    ]


def seen(queue: str, offset: int, s: Sent, append: int) -> Seen:
    return Seen(queue, offset, s.event_id, s.group, s.seq, s.final, append_ms=append)


def test_a_whole_group_released_after_its_final_and_contiguous_passes() -> None:
    a, o = whole("A", 3), Sent("o", None, 0, False)
    got = [seen("q", 0, o, 900), *(seen("q", 1 + i, s, 2000 + i) for i, s in enumerate(a))]
    r = judge_features([*a, o], [("receive", got)])
    assert (r.whole_sent, r.whole_ok, r.whole_early, r.whole_gapped) == (1, 1, 0, 0)
    assert r.violations() == []


def test_a_whole_group_streamed_before_its_final_was_sent_is_caught() -> None:
    a = whole("A", 3)  # the final created at 1020
    got = [seen("q", i, s, 1005 + 10 * i) for i, s in enumerate(a)]  # first appended at 1005
    r = judge_features(a, [("send", got), ("receive", got)])
    assert r.whole_early == 2 and r.whole_ok == 0
    assert r.violations() == ["whole groups released before their final was sent=2"]
    assert "15 ms before its final was sent" in r.examples[0]


def test_a_whole_group_with_a_record_inside_is_caught() -> None:
    a, o = whole("A", 3), Sent("o", None, 0, False)
    got = [seen("q", 0, a[0], 2000), seen("q", 1, o, 2001), *(seen("q", 2, a[1], 2002),)]
    got.append(seen("q", 3, a[2], 2003))
    r = judge_features([*a, o], [("receive", got)])
    assert r.whole_gapped == 1
    assert r.violations() == ["whole groups not contiguous=1"]


def logical(g: str, order: list[int]) -> list[Sent]:
    """Members of a logical group in the order sent (positions 0, 1, ...)."""
    n = len(order)
    return [
        Sent(f"{g}{seq}", g, seq, seq == n - 1, logical=True, position=pos)
        for pos, seq in enumerate(order)
    ]


def test_a_logical_group_sent_shuffled_and_received_in_sequence_is_restored() -> None:
    a = logical("L", [2, 0, 3, 1])
    by_seq = sorted(a, key=lambda s: s.seq)
    got = [seen("q", i, s, 5000 + i) for i, s in enumerate(by_seq)]
    r = judge_features(a, [("receive", got)])
    assert (r.logical_sent, r.logical_scattered, r.logical_restored) == (1, 1, 1)
    assert r.violations() == []


def test_a_logical_group_received_as_sent_is_not_restored_and_fails() -> None:
    a = logical("L", [2, 0, 3, 1])
    got = [seen("q", i, s, 5000 + i) for i, s in enumerate(a)]
    r = judge_features(a, [("receive", got)])
    assert r.logical_unrestored == 1 and r.logical_restored == 0
    assert r.violations() == ["logical groups not restored to sequence=1"]
    # ... and the main verdict counts it reordered too
    assert verify(a, got).reordered > 0


def test_a_logical_group_sent_in_sequence_is_not_counted_scattered() -> None:
    a = logical("L", [0, 1, 2])
    got = [seen("q", i, s, 5000 + i) for i, s in enumerate(a)]
    r = judge_features(a, [("receive", got)])
    assert (r.logical_scattered, r.logical_restored) == (0, 1)


def test_verify_judges_the_features_only_when_the_workload_has_them() -> None:
    plain = [Sent("o", None, 0, False)]
    assert verify(plain, [seen("q", 0, plain[0], 1)]).features is None
    a = whole("A", 2)
    got = [seen("q", i, s, 900 + i) for i, s in enumerate(a)]
    r = verify(a, got, forwarded=[replace(x, queue="transfer[0]") for x in got])
    assert r.features is not None and r.features.whole_early == 2  # both sides
    assert "whole groups released before their final was sent=2" in r.violations()


def test_the_plan_has_whole_and_logical_groups_scattered_and_the_rest_as_asked() -> None:
    spec = WorkloadSpec(
        run_id="t",
        senders=1,
        messages=3000,
        max_group=10,
        open_per_sender=3,
        whole_fraction=0.2,
        logical_fraction=0.2,
        priority_fraction=0.3,
        expiring_fraction=0.1,
        multicast_fraction=0.1,
        receive_queues=("q0", "q1", "q2"),
    )
    out = list(plan(spec, 0))
    assert len(out) == 3000 and len({s.event_id for s, _ in out}) == 3000
    groups: dict[str, list[tuple[Sent, dict[str, object]]]] = {}
    for s, ctx in out:
        if s.group is not None:
            groups.setdefault(s.group, []).append((s, ctx))
    kinds = Counter(
        "whole" if ms[0][0].whole else "logical" if ms[0][0].logical else "plain"
        for ms in groups.values()
    )
    assert kinds["whole"] > 10 and kinds["logical"] > 10 and kinds["plain"] > kinds["whole"]
    for ms in groups.values():
        assert sorted(s.seq for s, _ in ms) == list(range(len(ms)))  # complete, numbered
        first = ms[0][0]
        if first.whole:
            # ... the first member asks for whole delivery; none has a lifetime or priority
            assert [c.get("delivery") for _, c in ms] == ["complete"] + [None] * (len(ms) - 1)
            assert all(not s.expires and s.priority is None and s.queues is None for s, _ in ms)
        if first.logical:
            # sent at once, each with its number and the logical order, to a drawn partition
            positions = [s.position for s, _ in ms]
            assert positions == list(range(positions[0], positions[0] + len(ms)))  # type: ignore[operator]
            for s, ctx in ms:
                sent_headers = dict(ctx["headers"])  # type: ignore[call-overload]
                assert sent_headers[h.ORDER] == b"logical"
                assert sent_headers[h.SEQ] == str(s.seq).encode()
                assert isinstance(ctx["scatter"], int)
                assert not s.expires and s.priority is None
    scattered = sum(
        1
        for ms in groups.values()
        if ms[0][0].logical and [s.seq for s, _ in ms] != sorted(s.seq for s, _ in ms)
    )
    assert scattered > 5


def test_a_fault_kind_asked_for_that_never_happened_fails_the_run() -> None:
    r = ChaosResult(Report(), Counter({"SIGKILL from outside": 3}), policy="wait")
    r.faults = {"unit SIGKILL": (3, 3), "broker SIGKILL": (2, 2), "Redis failover": (1, 0)}
    assert r.violations() == ["fault kind Redis failover requested 1, happened 0"]
    lines = summary(r)
    (kinds,) = [line for line in lines if line.strip().startswith("fault kinds")]
    assert "unit SIGKILL: 3" in kinds and "Redis failover: 0 of 1" in kinds
    assert " 2 of 3 " in kinds  # kinds that happened, of those asked for
    assert lines[-1].startswith("RESULT: FAIL")
    r.faults["Redis failover"] = (1, 1)
    assert r.violations() == []
