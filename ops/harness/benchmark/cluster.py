"""Issue 30's row of `make bench` (`--only cluster`): grouped traffic through both sides
with the tables on a Redis Cluster of three primaries (a replica each, ops/cluster.sh), for
a topology of one cell and of three, and what each primary spends per message.

Each run is the whole path (a send unit and a receive unit, one process each, every cell in
it) draining 1 KB messages, every one in one of 10,000 open groups, under `share`, from a
send queue of `PARTITIONS` partitions (each cell owns as many). The runs, on topologies
whose names place their tables (ops/harness/benchmark/cellcost.py, checked against the
nodes' CLUSTER SLOTS):

    1 cell, on one primary     both sides' tables on one primary: one Redis doing it all
    1 cell, on two primaries   its send and receive tables on two
    3 cells                    each side's three cells on the three primaries

The three runs are repeated `ROUNDS` times, each round starting one place further along the
list (so that no configuration always comes first on a fresh cluster), and the 3-cell
share is the median of the rounds' side-by-side ratios. Around each run every primary's
INFO cpu and commandstats are read, and just before it their idle CPU for `IDLE_S` seconds.
The cluster is the one `make cluster-up` started if it answers (left running), else one of
the stage's own on free ports in the run's folder, stopped and deleted afterwards."""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ops.harness.benchmark.cellcost import (
    ClusterRun,
    NodeCounters,
    Placement,
    Ranges,
    choose_name,
    one_primary,
    placement,
    spread,
    two_primaries,
)
from ops.harness.benchmark.context import Benching
from ops.harness.benchmark.measure import SCRIPT_COMMANDS
from ops.harness.benchmark.model import GROUPED_ONLY, PATH
from ops.harness.stack.rediscluster import ClusterSet

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "ops" / "cluster.sh"
PARTITIONS = 6  # of the send queue: two a cell with three cells
RECEIVE_QUEUES = 15  # five a cell with three cells (the other stages' 16 would give cell 0 six)
IDLE_S = 2.0
RUNS = (
    ("1 cell, on one primary", 1, one_primary),
    ("1 cell, on two primaries", 1, two_primaries),
    ("3 cells", 3, spread),
)
ROUNDS = 3
CLUSTER_STEPS = 2 + ROUNDS * len(RUNS)  # cluster up, fill, the runs


def slot_ranges(cluster: ClusterSet) -> Ranges:
    """(first slot, last slot, its primary's port) as the first answering node says."""
    for node in range(1, len(cluster.ports) + 1):
        try:
            client: Any = cluster.node_client(node)
            slots = client.execute_command("CLUSTER", "SLOTS")
        except Exception:
            continue
        return [(int(a), int(b), int(primary[1])) for a, b, primary, *_ in slots]
    raise RuntimeError("no node of the Redis Cluster answers")


def counters(client: Any) -> NodeCounters:
    info: dict[str, Any] = client.info("cpu")
    stats: dict[str, Any] = client.info("commandstats")
    usec = sum(
        float(stats[f"cmdstat_{c}"]["usec"]) for c in SCRIPT_COMMANDS if f"cmdstat_{c}" in stats
    )
    return NodeCounters(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]), usec)


def idle_cpu(clients: dict[int, Any], seconds: float = IDLE_S) -> dict[int, float]:
    """Each node's CPU seconds a second while nothing routes (a measuring window)."""
    before = {p: counters(c) for p, c in clients.items()}
    time.sleep(seconds)
    return {p: (counters(c) - before[p]).cpu_s / seconds for p, c in clients.items()}


def names(prefix: str) -> Iterator[str]:
    while True:
        yield f"{prefix}.{secrets.token_hex(3)}"


def run_cluster(bench: Benching, running: ClusterSet | None = None, rounds: int = ROUNDS) -> None:
    """The runs, on `running` (a test's cluster, left as it was), on `make cluster-up`'s if
    it answers, or on one of its own (started and stopped here)."""
    folder = bench.run_dir / f"{bench.id}.redis-cluster"
    cluster, own = running, False
    if cluster is None:
        cluster = ClusterSet(SCRIPT, ROOT / ".stack" / "cluster")
        if not cluster.whole():
            cluster, own = ClusterSet.private(SCRIPT, folder), True
    t0 = time.monotonic()
    try:
        if own:
            cluster.up()
        cluster.wait_whole()
        bench.progress(
            f"Redis Cluster {'up' if own else 'found'} at :{cluster.ports[0]}-... "
            f"({time.monotonic() - t0:.0f}s)"
        )
        _runs(bench, cluster, rounds)
    finally:
        if own:
            cluster.down()
            shutil.rmtree(folder, ignore_errors=True)


def _runs(bench: Benching, cluster: ClusterSet, rounds: int) -> None:
    redis = bench.base.redis.model_copy(update={"cluster_nodes": cluster.nodes})
    on = bench.on_servers(bench.base.model_copy(update={"redis": redis}), "")
    on.partitions, on.receive_queues = PARTITIONS, RECEIVE_QUEUES
    ranges = slot_ranges(cluster)
    primaries = sorted({port for *_, port in ranges})
    clients = {p: cluster.node_client(cluster.ports.index(p) + 1) for p in primaries}
    try:
        count = bench.spec.messages(GROUPED_ONLY.size)
        on.fill_all([GROUPED_ONLY], {GROUPED_ONLY: count})
        for n in range(rounds):
            k = n % len(RUNS)  # each round starts one run further along
            for label, cells, want in RUNS[k:] + RUNS[:k]:

                def place(name: str, cells: int = cells) -> Placement:
                    return placement(redis.key_prefix, name, cells, ranges)

                name, where = choose_name(names(f"{on.id}.cells{cells}"), place, want)
                on.suffix = f", Redis Cluster, {label}"
                idle = idle_cpu(clients)
                before = {p: counters(c) for p, c in clients.items()}
                t0 = time.monotonic()
                env = {"ROUTER_TOPOLOGY__CELLS": str(cells)}
                t = on.run_stage(PATH, GROUPED_ONLY, env=env, name=name)
                seconds = time.monotonic() - t0
                used = {p: counters(c) - before[p] for p, c in clients.items()}
                delivered = count  # the whole topic, drained
                bench.results.cluster.append(
                    ClusterRun(label, cells, delivered, seconds, used, idle, where, t.msg_s, n)
                )
    finally:
        on.cleanup()
