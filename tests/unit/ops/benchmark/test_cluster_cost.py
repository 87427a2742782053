"""The Redis Cluster stage's figures (ops/harness/benchmark/cellcost.py): each primary's cost per
message with its idling taken out, the busiest primary, the ceilings, the 3-cell share
against the 1-cell figure; where a topology's tables land; and the stage's place in the plan."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from redis.crc import key_slot

from ops.harness.benchmark.cellcost import (
    CELLS_GOAL,
    ClusterRun,
    NodeCounters,
    choose_name,
    lines,
    one_primary,
    placement,
    spread,
    two_primaries,
)
from ops.harness.benchmark.cluster import CLUSTER_STEPS, ROUNDS, RUNS
from ops.harness.benchmark.model import BenchSpec, Results
from ops.harness.benchmark.plan import PARTS, plan
from router.table.store.codec import TableKeys

RANGES = [(0, 5460, 7001), (5461, 10922, 7002), (10923, 16383, 7003)]


def run(label: str, cells: int, cpu_s: dict[int, float], where: dict[str, int]) -> ClusterRun:
    used = {p: NodeCounters(cpu, cpu * 1e6) for p, cpu in cpu_s.items()}
    idle = dict.fromkeys(cpu_s, 0.002)  # 2 ms a second idle, 5 s: 0.01 s less
    return ClusterRun(label, cells, 10_000, 5.0, used, idle, where, 9_000.0)


ONE = run(
    "1 cell, on one primary",
    1,
    {7001: 0.17, 7002: 0.01, 7003: 0.01},
    {"send 0": 7001, "receive 0": 7001},
)
TWO = run(
    "1 cell, on two primaries",
    1,
    {7001: 0.09, 7002: 0.09, 7003: 0.01},
    {"send 0": 7001, "receive 0": 7002},
)
SPREAD = {"send 0": 7001, "send 1": 7002, "send 2": 7003}
SPREAD |= {"receive 0": 7002, "receive 1": 7003, "receive 2": 7001}
THREE = run("3 cells", 3, {7001: 0.07, 7002: 0.06, 7003: 0.06}, SPREAD)


def test_a_primarys_cost_per_message_leaves_its_idling_out() -> None:
    assert ONE.cpu_us(7001) == pytest.approx(16.0)  # (0.17 - 0.002 * 5) s / 10,000 messages
    assert ONE.cpu_us(7002) == pytest.approx(0.0)
    assert ONE.script_us(7001) == pytest.approx(17.0)
    assert ONE.busiest == 7001 and ONE.peak_us == pytest.approx(16.0)
    assert ONE.ceiling == pytest.approx(62_500)  # the busiest primary's thread full
    assert THREE.busiest == 7001 and THREE.peak_us == pytest.approx(6.0)
    assert THREE.total_us == pytest.approx(16.0)
    assert (ONE.nodes_used, TWO.nodes_used, THREE.nodes_used) == (1, 2, 3)


def test_the_report_gives_the_3_cell_share_against_each_1_cell_run() -> None:
    out = list(lines([ONE, TWO, THREE]))
    assert len(out) == 5
    assert out[0].startswith(
        "Redis Cluster, 1 cell, on one primary (send 0 :7001, receive 0 :7001)"
    )
    assert ":7001 16.00 (17.00 in scripts)" in out[0] and "ceiling 62,500 msg/s" in out[0]
    assert "(55,556 per primary holding its tables)" in out[2]  # 166,667 over three
    assert out[3] == (
        "Redis Cluster, 3 cells / 1 cell, on one primary, busiest primary's CPU per message: "
        f"0.38 (goal <= {CELLS_GOAL:g}); ceiling x2.67"
    )
    assert out[4].startswith("Redis Cluster, 3 cells / 1 cell, on two primaries, busiest")
    assert "0.75;" in out[4] and "goal" not in out[4]  # 6 / 8: no goal against two nodes
    assert list(lines([ONE])) == list(lines([ONE]))[:1]  # no 3-cell run: no ratio


def test_over_rounds_the_share_is_the_median_of_each_rounds_side_by_side_ratio() -> None:
    def again(r: ClusterRun, n: int, scale: float) -> ClusterRun:
        used = {p: NodeCounters(c.cpu_s * scale, c.script_us) for p, c in r.used.items()}
        return dataclasses.replace(r, used=used, round=n)

    # round 2 on a machine twice as slow throughout; round 3 rotated, its 1-cell run cheap
    runs = [ONE, TWO, THREE]
    runs += [again(ONE, 1, 2.0), again(TWO, 1, 2.0), again(THREE, 1, 2.0)]
    runs += [again(THREE, 2, 1.0), again(ONE, 2, 0.5), again(TWO, 2, 1.0)]
    out = list(lines(runs))
    assert len(out) == 11
    assert out[0].startswith("Redis Cluster, 1 cell, on one primary, round 1 (send 0 :7001")
    assert out[6].startswith("Redis Cluster, 3 cells, round 3 (")
    # 6 / 16, 13 / 33 ((0.14 - 0.01) s against (0.34 - 0.01) s), 6 / 7.5: the median 0.39
    assert out[9] == (
        "Redis Cluster, 3 cells / 1 cell, on one primary, busiest primary's CPU per message: "
        f"0.39 (goal <= {CELLS_GOAL:g}) (median of 3 rounds: 0.38, 0.39, 0.80); ceiling x2.54"
    )
    assert out[10].startswith("Redis Cluster, 3 cells / 1 cell, on two primaries, busiest")
    assert "(median of 3 rounds: " in out[10]


def test_a_tables_primary_follows_its_slot_as_the_nodes_compute_it() -> None:
    p = placement("router", "shop", 3, RANGES)
    for c, tag in enumerate(("shop", "shop/1", "shop/2")):
        for side in ("send", "receive"):
            slot = key_slot(TableKeys.of("router", tag, side).entries.encode())  # type: ignore[arg-type]
            assert RANGES[[a <= slot <= b for a, b, _ in RANGES].index(True)][2] == p[f"{side} {c}"]


def test_names_are_chosen_to_place_the_tables_as_each_run_wants() -> None:
    names = (f"bench.{i}" for i in range(100_000))
    for cells, want in ((1, one_primary), (1, two_primaries), (3, spread)):
        name, where = choose_name(names, lambda n, c=cells: placement("router", n, c, RANGES), want)
        assert where == placement("router", name, cells, RANGES) and want(where)
    assert one_primary({"send 0": 1, "receive 0": 1}) and not two_primaries(
        {"send 0": 1, "receive 0": 1}
    )
    assert not spread(
        {"send 0": 1, "send 1": 2, "send 2": 2, "receive 0": 1, "receive 1": 2, "receive 2": 3}
    )
    with pytest.raises(RuntimeError):
        choose_name(iter(["a"]), lambda n: {"send 0": 1, "receive 0": 2}, one_primary)


def test_the_cluster_stage_is_a_part_of_its_own_and_of_the_full_run() -> None:
    def weight(spec: BenchSpec, only: tuple[str, ...] = ()) -> int:
        bench: Any = SimpleNamespace(spec=spec, results=Results(spec))
        return sum(w for w, _ in plan(bench, only))

    assert "cluster" in PARTS
    assert weight(BenchSpec(), ("cluster",)) == CLUSTER_STEPS == 2 + ROUNDS * len(RUNS)
    assert weight(BenchSpec()) - weight(BenchSpec(cluster=False)) == CLUSTER_STEPS
    assert [cells for _, cells, _ in RUNS] == [1, 1, 3]
