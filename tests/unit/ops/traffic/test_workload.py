"""The workload plan: well-formed groups, the requested mix, every group finished."""

from __future__ import annotations

from collections import defaultdict

from ops.harness.scenarios.burst import BurstStats, burst_report, burst_workload, hops
from ops.harness.traffic.workload import WorkloadSpec, plan
from ops.harness.verdict.records import Seen


def test_plan_makes_complete_groups_and_hits_the_quota() -> None:
    spec = WorkloadSpec(run_id="t", senders=3, messages=3001, open_per_sender=2, max_group=30)
    total = 0
    for index in range(spec.senders):
        seqs: dict[str, list[int]] = defaultdict(list)
        finals: dict[str, int] = defaultdict(int)
        ordinary = 0
        for sent, _ in plan(spec, index):
            total += 1
            if sent.group is None:
                ordinary += 1
                continue
            seqs[sent.group].append(sent.seq)
            finals[sent.group] += sent.final
        for group, got in seqs.items():
            assert got == list(range(len(got))), group
            assert finals[group] == 1, group
        grouped = sum(len(s) for s in seqs.values())
        assert 0.6 < grouped / (grouped + ordinary) < 0.8
    assert total == spec.messages


def test_the_grouped_fraction_holds_even_with_many_groups_open() -> None:
    """The issue's burst: 150 groups open per sender would otherwise crowd out the
    ordinary messages at the end (every slot promised to an open group)."""
    spec = burst_workload("t")
    sent = [s for i in range(spec.senders) for s, _ in plan(spec, i)]
    ordinary = sum(1 for s in sent if s.group is None)
    groups = {s.group for s in sent if s.group}
    assert len(sent) == 3_000 and ordinary == 900
    assert 250 <= len(groups) <= 350
    most_open = open_now = 0
    for s in sent:  # sender 0 then sender 1: the peak of one sender
        open_now += (s.seq == 0 and s.group is not None) - s.final
        most_open = max(most_open, open_now)
    assert most_open >= 100


def test_the_burst_report_gives_every_row_and_the_median_of_the_ratios_per_round() -> None:
    def stats(policy: str, seconds: float, ord_p99: float, il: int) -> BurstStats:
        return BurstStats(
            policy, 3000, 300, seconds, (1.0, ord_p99), (1.0, 2 * ord_p99), (il, il), ()
        )

    rounds = [
        {"share": stats("share", 1.0, 100, 50), "wait": stats("wait", 2.0, 150, 0)},  # 0.50, 1.5
        {"share": stats("share", 1.0, 100, 40), "wait": stats("wait", 4.0, 400, 0)},  # 0.25, 4
        {"share": stats("share", 2.0, 200, 60), "wait": stats("wait", 2.5, 200, 0)},  # 0.80, 1
    ]
    lines = burst_report(rounds)
    rows = [line for line in lines if line[:5].strip() in ("1", "2", "3")]
    assert [(r.split()[0], r.split()[1]) for r in rows] == [
        ("1", "share"),
        ("1", "wait"),
        ("2", "share"),
        ("2", "wait"),
        ("3", "share"),
        ("3", "wait"),
    ]
    assert "0.50 / 1.50 / 1.50; 0.25 / 4.00 / 4.00; 0.80 / 1.00 / 1.00" in lines[-3]
    assert lines[-2] == (
        "wait/share, median of 3 rounds: throughput 0.50, ordinary p99 1.50, group p99 1.50"
    )
    assert lines[-1] == "interleaved in all rounds: share 300, wait 0"


def test_a_phased_plan_opens_every_group_before_any_final() -> None:
    """`make bench`'s all-open burst (`WorkloadSpec.phased`): every first member, then the
    middle ones, then the finals; whole groups in order, the quota and the mix kept."""
    spec = WorkloadSpec(
        run_id="t", senders=2, messages=1001, grouped_fraction=0.9, max_group=4, phased=True
    )
    total = 0
    for index in range(spec.senders):
        sent = [s for s, _ in plan(spec, index)]
        total += len(sent)
        seqs: dict[str, list[int]] = defaultdict(list)
        for s in sent:
            if s.group is not None:
                seqs[s.group].append(s.seq)
        assert all(got == list(range(len(got))) and len(got) >= 2 for got in seqs.values())
        assert all(sum(s.final for s in sent if s.group == g) == 1 for g in seqs)
        firsts = [n for n, s in enumerate(sent) if s.group is not None and s.seq == 0]
        finals = [n for n, s in enumerate(sent) if s.final]
        assert max(firsts) < min(finals), "a final before every group was open"
        ordinary = sum(s.group is None for s in sent)
        assert 0.05 < ordinary / len(sent) < 0.15
        assert ordinary > 0 and min(n for n, s in enumerate(sent) if s.group is None) < max(firsts)
    assert total == spec.messages


def test_the_burst_hops_are_read_off_the_queues_per_message() -> None:
    """Each side's hop from the records alone: create -> first transfer copy, that copy ->
    first receive copy; a message not on the transfer topic counts on neither side."""

    def seen(queue: str, offset: int, event: str, append: int, created: int = 0) -> Seen:
        return Seen(queue, offset, event, None, 0, False, append_ms=append, created_ms=created)

    transfer = [
        seen("transfer[0]", 0, "a", 110, 100),
        seen("transfer[1]", 0, "b", 250, 100),
        seen("transfer[1]", 1, "a", 400, 100),  # a second copy: the first one counts
    ]
    received = [seen("recv.1", 0, "a", 150, 100), seen("recv.2", 0, "b", 300, 100)]
    received.append(seen("recv.2", 1, "c", 500, 100))  # never seen on the transfer topic
    send, receive = hops(transfer, received)
    assert sorted(send) == [10.0, 150.0]
    assert sorted(receive) == [40.0, 50.0]
