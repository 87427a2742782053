"""Issue 13's row of `make bench`: the send unit against the raw relay on a three-broker
cluster (KRaft, ops/ha.sh: replication factor 3, min.insync.replicas=2, every producer
acks=all), side by side, on the ratio line's workload. The cluster (about 1.5 GB and real
CPU) runs only inside this stage: started on free ports in the run's folder, stopped and
its data deleted afterwards. Redis is the stack's."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from ops.harness.benchmark.context import Benching
from ops.harness.benchmark.model import HA_SUFFIX, PY_RELAY, SEND
from ops.harness.stack.hacluster import HaCluster

ROOT = Path(__file__).resolve().parents[3]
HA_STEPS = 5  # cluster up, fill, warm-up, raw relay, send unit


def run_ha(bench: Benching, running: HaCluster | None = None) -> None:
    """The row, on a cluster of its own (started and stopped here), or on `running` (a
    test's), left as it was."""
    folder = bench.run_dir / f"{bench.id}.ha-cluster"
    cluster = running or HaCluster.private(ROOT / "ops" / "ha.sh", folder)
    t0 = time.monotonic()
    try:
        if running is None:
            cluster.up()
        bench.progress(
            f"three-broker cluster up at {cluster.bootstrap} ({time.monotonic() - t0:.0f}s)"
        )
        kafka = bench.base.kafka.model_copy(update={"bootstrap_servers": cluster.bootstrap})
        base = bench.base.model_copy(update={"kafka": kafka})
        ha = bench.on_servers(base, HA_SUFFIX)
        w = bench.spec.ratio_workload()
        try:
            ha.fill_all([w])
            # A fresh cluster's first run is slow (cold caches, JIT, leaders settling).
            bench.results.throughput.remove(ha.run_stage(PY_RELAY, w))
            ha.run_stage(PY_RELAY, w)
            ha.run_stage(SEND, w)
        finally:
            ha.cleanup()
    finally:
        if running is None:
            cluster.down()
            shutil.rmtree(folder, ignore_errors=True)
