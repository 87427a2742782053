"""The workload plan: well-formed groups, the requested mix, every group finished."""

from __future__ import annotations

from collections import defaultdict

from ops.harness.workload import WorkloadSpec, plan


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
