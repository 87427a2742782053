"""Every network fault kind in one short chaos run, with unit kills, under the default policy
`wait` (`make test-faults`; the short version in `make test` is
tests/integration/netfaults/test_net_chaos.py). On the session's private stack, whose broker
has a listener per unit link: each unit's Redis and broker traffic runs through its own
Toxiproxy proxies (ops.harness.stack.netlinks), and one link at a time is cut from Redis
past the leases, cut from the broker past the session, slowed by 100-500 ms either way, or
has its connections reset. Judged as every chaos run is: nothing lost, duplicated,
reordered or split, not one interleaving, every message delivered or expired once, no unit
exit but ours.

Found so far (2026-11-28): clean verdicts; a receive unit cut off from the broker can stall
for the unit's transactional call deadline (45 s) after the heal before its producer is
replaced (docs/explanation/guarantees.md, network faults)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.harness.scenarios.chaos_run import ChaosSpec
from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.netplan import KINDS
from ops.harness.stack.toxiproxy import Toxiproxy
from router.config import RouterSettings
from tests.fixtures.chaosruns import assert_clean, run_reported

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def test_every_network_fault_kind_with_kills_harms_nothing(
    private_stack: LocalStack,
    private_settings: RouterSettings,
    toxiproxy: Toxiproxy,  # only to skip where Toxiproxy cannot be built; the run starts its own
    tmp_path: Path,
) -> None:
    spec = ChaosSpec(
        messages=10_000,
        senders=4,
        rate=60.0,
        kills=6,
        restart_broker=False,
        restart_redis=False,
        send_units=2,
        receive_units=3,
        transfer_partitions=3,
        receive_queues=3,
        open_per_sender=3,
        net_faults=len(KINDS),
        seed=9,
        catch_up_s=300,
    )
    result, _lines, report = run_reported(private_settings, private_stack, spec, tmp_path)
    assert sorted(result.net_faults.elements()) == sorted(KINDS), report
    assert result.kills >= 6, report
    assert_clean(result, report)
