"""Pure logic of the routing scripts' cost driver (ops/harness/benchmark/scriptcost.py): the
traffic it routes, what the receive side reads of the send side's decisions, the figures."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from ops.harness.benchmark.model import SCRIPT_GOAL_US, BenchSpec, Results
from ops.harness.benchmark.report import summary
from ops.harness.benchmark.scriptcost import (
    GROUPED,
    KINDS,
    LOADS,
    PACED,
    UNSATURATED,
    Cost,
    Traffic,
    figures,
    forwarded,
    kind_batches,
    kind_figures,
)


def test_traffic_keeps_each_group_whole_on_one_lane_in_sequence() -> None:
    load = replace(UNSATURATED, batch_size=200)
    traffic = Traffic(load, "q")
    seen: dict[str, list[int]] = defaultdict(list)
    lanes: dict[str, set[str]] = defaultdict(set)
    finals = 0
    ordinary = 0
    offsets: dict[str, list[int]] = defaultdict(list)
    for _ in range(20):
        for r in traffic.batch():
            offsets[r.lane].append(int(r.token.rsplit("/", 1)[1]))
            assert r.token.startswith(r.lane + "/")
            if r.guarantee_id is None:
                ordinary += 1
                assert r.lane_seq is None and not r.final
                continue
            assert r.lane_seq is not None
            assert r.continuation == (r.lane_seq > 0)
            seen[r.guarantee_id].append(r.lane_seq)
            lanes[r.guarantee_id].add(r.lane)
            finals += r.final
            if r.final:
                assert load.min_group <= r.lane_seq + 1 <= load.max_group
    assert 0.4 < ordinary / 4000 < 0.6
    assert finals > 10
    for gid, seqs in seen.items():
        assert seqs == list(range(len(seqs))), gid
        assert len(lanes[gid]) == 1
    for lane, offs in offsets.items():  # each lane's offsets in order, none reused
        assert offs == list(range(len(offs))), lane


def test_the_receive_side_reads_what_went_straight_on_each_transfer_partition() -> None:
    traffic = Traffic(replace(GROUPED, open_groups=5, batch_size=6), "q")
    requests = traffic.batch()
    decisions = ["t/0", "!w", "t/1", "t/0", "!h", "t/1"]
    offsets = {"t/1": 7}
    onward = forwarded(requests, decisions, offsets, 1000)
    assert [r.lane for r in onward] == ["t/0", "t/1", "t/0", "t/1"]
    assert [r.token for r in onward] == ["t/0/0", "t/1/7", "t/0/1", "t/1/8"]
    straight = [r for r, d in zip(requests, decisions, strict=True) if not d.startswith("!")]
    assert [r.guarantee_id for r in onward] == [r.guarantee_id for r in straight]
    assert [r.final for r in onward] == [r.final for r in straight]
    assert offsets == {"t/0": 2, "t/1": 9}


def test_figures_are_per_grouped_message_with_the_goal_and_reach_the_summary() -> None:
    send, receive = Cost(), Cost()
    send.grouped, receive.grouped = 100, 50
    send.add("route", 300.0, 400.0)
    send.add("settle", 100.0, 100.0)
    receive.add("route", 200.0, 250.0)
    line = figures([(send, receive)])
    assert line.startswith(
        f"8.00 us of Redis CPU per grouped message, both sides (goal <= {SCRIPT_GOAL_US:g}"
    )
    assert "10.00 us in scripts" in line
    assert "send 4.00 (route 3.00, settle 1.00); receive 4.00 (route 4.00, settle 0.00)" in line
    results = Results(BenchSpec())
    results.scripts.append(f"grouped: {line}")
    assert any(s.endswith(f"grouped: {line}") for s in summary(results))


def test_each_kind_comes_in_its_own_batch_and_each_group_whole_on_one_lane() -> None:
    lanes = ["q/0", "q/1", "q/2"]
    kinds = list(kind_batches(3, 50, lanes, 1000))
    assert [k for k, _ in kinds] == list(KINDS)
    by = dict(kinds)
    assert all(r.guarantee_id is None and r.lane_seq is None for r in by["ordinary"])
    firsts, middles, finals = by["first"], by["middle"], by["final"]
    assert [r.guarantee_id for r in firsts] == [r.guarantee_id for r in finals]
    assert len({r.guarantee_id for r in firsts}) == 50
    for f, m, z in zip(firsts, middles, finals, strict=True):
        assert (f.lane_seq, m.lane_seq, z.lane_seq) == (0, 1, 2)
        assert not f.continuation and m.continuation and z.continuation
        assert (f.final, m.final, z.final) == (False, False, True)
        assert f.lane == m.lane == z.lane
    offsets: dict[str, list[int]] = defaultdict(list)
    for _, batch in kinds:
        for r in batch:
            assert r.token.startswith(r.lane + "/")
            offsets[r.lane].append(int(r.token.rsplit("/", 1)[1]))
    for offs in offsets.values():  # each lane's offsets in order, none reused
        assert offs == sorted(set(offs))
    later = [int(r.token.rsplit("/", 1)[1]) for _, b in kind_batches(4, 50, lanes, 1000) for r in b]
    assert min(later) > max(max(o) for o in offsets.values())


def test_kind_figures_are_per_message_through_both_sides() -> None:
    send, receive = Cost(), Cost()
    send.messages = receive.messages = 10
    send.add("route", 30.0, 30.0)
    send.add("settle", 10.0, 10.0)
    receive.add("route", 20.0, 20.0)
    pair = (send, receive)
    line = kind_figures([{kind: pair for kind in KINDS}])
    assert line == "first 6.00, middle 6.00, final 6.00, ordinary 6.00"


def test_the_paced_load_is_the_grouped_one_with_a_pause_between_batches() -> None:
    assert LOADS["paced"] is PACED
    assert replace(PACED, name="grouped", pace_ms=0) == GROUPED
    assert "25 ms between batches" in PACED.label()
    assert "between batches" not in GROUPED.label()
