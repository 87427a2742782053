"""Pure logic of the benchmark driver: the workload model and the reported figures."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from ops.harness.bench import (
    KEY,
    BenchSpec,
    GroupModel,
    Latency,
    Results,
    Throughput,
    Workload,
    _done,
    payloads,
    summary,
    table,
)


@pytest.mark.parametrize("grouped", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("open_groups", [10, 1000])
def test_group_model_keeps_groups_well_formed(grouped: float, open_groups: int) -> None:
    model = GroupModel(Workload(100, grouped, open_groups), seed=1, prefix="t")
    seqs: dict[str, list[int]] = defaultdict(list)
    finals: Counter[str] = Counter()
    ordinary = 0
    n = 20_000
    for _ in range(n):
        gid, final, seq = model.next()
        if gid is None:
            ordinary += 1
            assert not final
            continue
        assert not finals[gid], f"{gid} continued after its final"
        seqs[gid].append(seq)
        finals[gid] += final
    # Sequence numbers count up from 0 within every group.
    assert all(s == list(range(len(s))) for s in seqs.values())
    assert ordinary / n == pytest.approx(1 - grouped, abs=0.02)
    # Never more groups open at once than the model's slots.
    open_now = sum(1 for g in seqs if not finals[g])
    assert open_now <= open_groups
    if grouped and open_groups == 10:
        assert sum(finals.values()) > 100  # groups end and new ones begin


def test_group_model_is_deterministic() -> None:
    w = Workload(100, 0.5, 100)
    one, two, other = GroupModel(w, 3, "p"), GroupModel(w, 3, "p"), GroupModel(w, 4, "p")
    first = [one.next() for _ in range(500)]
    assert first == [two.next() for _ in range(500)]
    assert first != [other.next() for _ in range(500)]


def test_a_transactional_input_is_done_one_offset_before_its_end() -> None:
    ends = {("t", 0): 101, ("t", 1): 0}
    assert not _done({("t", 0): 99}, ends, slack=1)
    assert _done({("t", 0): 100}, ends, slack=1)  # the commit marker at offset 100
    assert not _done({("t", 0): 100}, ends, slack=0)
    assert _done({("t", 0): 101}, ends, slack=0)


def test_messages_per_run_follow_the_byte_budget() -> None:
    spec = BenchSpec(bytes_per_run=1_000_000, min_messages=500, max_messages=5_000)
    assert spec.messages(100) == 5_000
    assert spec.messages(1_000) == 1_000
    assert spec.messages(10_000) == 500
    assert BenchSpec().key() == KEY
    reduced = BenchSpec(sizes=(100,), grouped=(0.0, 1.0), open_groups=(10,))
    assert reduced.key() in reduced.workloads()


def test_figures_and_the_ratio_come_from_the_measurements() -> None:
    r = Results(BenchSpec())
    r.throughput = [
        Throughput("raw relay (send side)", KEY, 1, 10_000, 1.0, 0.2),
        Throughput("send unit", KEY, 1, 9_000, 1.0, 0.3, redis_round_trips=36, messages_in=9_000),
        Throughput("raw relay (send side)", KEY, 2, 15_000, 1.0, 0.4),
        Throughput("send unit", KEY, 2, 13_500, 1.0, 0.6),
    ]
    r.key_pairs = [(10_000, 9_000), (10_000, 7_000), (10_000, 8_000)]
    r.latency = [
        Latency("raw relays chained", 4_000, 1000, 10.0, 20.0, 30.0),
        Latency("whole path", 4_000, 1000, 12.0, 30.0, 40.0),
    ]
    assert r.ratio == pytest.approx(0.8)  # the median pair, not the best one
    send = r.find("send unit", KEY)
    assert send is not None
    assert send.msg_s == 9_000
    assert send.mb_s == pytest.approx(9.0)
    assert send.cpu_s_per_million == pytest.approx(0.3 / 9_000 * 1e6)
    assert send.round_trips_per_msg == pytest.approx(0.004)
    md = table(r)
    assert "| send unit | 1 | 1 KB, 50% grouped, 10,000 open groups | 9,000 |" in md
    assert "| 0.90 |" in md  # against the raw relay of the same workload
    lines = "\n".join(summary(r))
    assert "0.80" in lines
    assert "1.50" in lines  # whole path p99 30 ms / chained relays 20 ms
    assert "2 processes / 1 = 1.50" in lines


def test_payloads_are_incompressible_for_lz4() -> None:
    """Distinct random payloads spanning more than lz4's 64 KB window."""
    for size in (100, 1_000, 10_000):
        pool = payloads(size, seed=1)
        assert all(len(p) == size for p in pool)
        assert len(set(pool)) == len(pool)
        assert sum(len(p) for p in pool) > 64 * 1024
