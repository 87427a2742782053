"""The short network-fault run inside `make test` (the full set is `make chaos` with
--private-stack, and tests/integration/faults/test_net_faults_run.py in `make test-faults`).

Under the default policy `wait`, two receive units are cut off at once through their own
Toxiproxy links (ops.harness.stack.netlinks): one from Redis for longer than its leases
(15 s), the other from the broker for longer than its consumer session (10 s); then both
links heal. Judged as every chaos run is, from what the destinations hold: nothing lost,
duplicated, reordered or split, not one interleaving, every message delivered or expired
once, no unit exit that was not ours; each fault logged as a disturbance.

Receive units only: with a SEND unit cut off from the broker (this test's first version),
the send side's waiting room stalled in 1 of 5 runs (an open defect,
tests/integration/faults/test_send_unit_cut.py in `make test-faults`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ops.harness.scenarios.chaos_run import ChaosSpec
from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.toxiproxy import Toxiproxy
from router.config import RouterSettings
from tests.fixtures.chaosruns import assert_clean, run_reported

pytestmark = pytest.mark.slow


def test_a_receive_unit_cut_off_from_redis_and_one_from_the_broker_harm_nothing(
    private_stack: LocalStack,
    private_settings: RouterSettings,
    toxiproxy: Toxiproxy,  # only to skip where Toxiproxy cannot be built; the run starts its own
    tmp_path: Path,
) -> None:
    spec = ChaosSpec(
        messages=1_500,
        senders=3,
        rate=40.0,
        kills=0,
        restart_broker=False,
        restart_redis=False,
        send_units=2,
        receive_units=2,
        transfer_partitions=3,
        receive_queues=3,
        open_per_sender=3,
        net_faults=2,
        net_kinds=("redis-cut", "kafka-cut"),
        net_roles=("receive-unit",),
        net_cut_s=16.0,
        seed=5,
        catch_up_s=150,
    )
    result, lines, report = run_reported(private_settings, private_stack, spec, tmp_path)
    assert result.net_faults == Counter({"redis-cut": 1, "kafka-cut": 1}), report
    cut = [line for line in lines if "network fault:" in line]
    assert len(cut) == 2 and all("(nobody)" not in line for line in cut), report
    slots = {line.split("fault: ")[1].split()[0] for line in cut}
    assert len(slots) == 2, f"two units, not one:\n{report}"
    assert_clean(result, report)
