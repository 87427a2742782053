"""Issue 13's row of `make bench`, short: the send unit against the raw relay on the
three-broker cluster (acks=all, min.insync.replicas=2), on the session's cluster rather
than one of its own. Figures are not asserted; that both stages moved every message and
the row is reported is."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.harness.benchmark.ha import run_ha
from ops.harness.benchmark.model import HA_SUFFIX, PY_RELAY, SEND, BenchSpec
from ops.harness.benchmark.report import summary
from ops.harness.benchmark.runner import Bench
from ops.harness.stack.hacluster import HaCluster
from router.config import RouterSettings

pytestmark = [pytest.mark.slow, pytest.mark.ha]


def test_the_bench_row_on_three_brokers(
    ha_cluster: HaCluster, base_settings: RouterSettings, tmp_path: Path
) -> None:
    lines: list[str] = []
    spec = BenchSpec(min_messages=3_000, max_messages=3_000, java=False)
    bench = Bench(base_settings, spec, tmp_path, out=lines.append)
    try:
        run_ha(bench, ha_cluster)
    finally:
        bench.cleanup()
    rows = {t.stage: t for t in bench.results.throughput}
    assert set(rows) == {PY_RELAY + HA_SUFFIX, SEND + HA_SUFFIX}, lines
    for t in rows.values():
        assert t.messages > 0 and t.msg_s > 0 and t.cpu_s > 0, t
        assert t.workload == spec.ratio_workload()
    send = rows[SEND + HA_SUFFIX]
    assert send.messages_in >= 3_000  # the unit took every message in
    assert any(
        x.startswith("send unit / raw relay on three brokers") for x in summary(bench.results)
    )
