"""The short version of `make chaos ARGS="--ha --all-features"` (make test-ha; the long one is
100,000 messages): every feature in one workload (the waiting room, whole groups, logical
order with scattered members, priority bands, multicast, lifetimes) on three brokers
(replication 3, min.insync.replicas 2) and Redis with Sentinel (min_replica_acks 1) of the
run's own, under unit SIGKILLs, a unit pause, the six network faults (each unit's own
listeners of the brokers; its own proxies to the Redis data nodes, which it reaches through
`redis.address_map`, and to the Sentinels), a broker SIGKILLed and started again, the
Redis primary SIGKILLed (Sentinel fails over) and the replica paused. Judged from the
destinations: nothing lost, duplicated, reordered, split, no interleaving at all (policy
wait), whole groups whole, logical groups in sequence, and every fault kind asked for
happened. 3 min 40 s on the shared 2-core machine (32 s the servers' start, 169 s the run,
20 s their stop; 2 min 20 s with the broker kinds alone): too long for `make test`."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.harness.scenarios.chaos_run import ChaosSpec
from ops.harness.stack.hastack import HaStack
from ops.harness.stack.netplan import KINDS
from ops.harness.stack.toxiproxy import ToxiproxyMissing, ensure_binary
from router.config import RouterSettings
from tests.fixtures.chaosruns import run_reported

pytestmark = [pytest.mark.slow, pytest.mark.ha]

SPEC = ChaosSpec(
    messages=3_000,
    senders=4,
    rate=100.0,
    kills=4,
    pauses=1,
    net_faults=len(KINDS),
    net_kinds=KINDS,
    broker_restarts=1,
    redis_restarts=1,
    redis_at=0.6,
    replica_pauses=1,
    seed=5,
    busy_policy="wait",
    transfer_partitions=3,
    receive_queues=3,
    open_per_sender=3,
    whole_fraction=0.15,
    logical_fraction=0.15,
    catch_up_s=300,
)


@pytest.fixture
def ha_stack() -> Iterator[HaStack]:
    try:
        ensure_binary()
    except ToxiproxyMissing as exc:
        pytest.skip(f"Toxiproxy cannot be built here (ops/toxiproxy.sh): {exc}")
    with tempfile.TemporaryDirectory(prefix="router-ha-chaos-") as folder:
        stack = HaStack.private(Path(folder), unit_links=SPEC.send_units + SPEC.receive_units)
        stack.up()
        try:
            yield stack
        finally:
            stack.down()


def test_short_ha_chaos_with_every_feature_passes_with_every_fault_kind(
    ha_stack: HaStack, tmp_path: Path
) -> None:
    base = RouterSettings(
        kafka=ha_stack.kafka_settings(), redis=ha_stack.redis_settings(key_prefix="router-test")
    )
    result, _lines, report = run_reported(base, ha_stack, SPEC, tmp_path)
    r = result.report
    assert (r.lost, r.duplicated, r.reordered, r.split_groups, r.unexpected) == (0, 0, 0, 0, 0), (
        report
    )
    assert r.interleaved == 0 and all(s.interleaved == 0 for s in r.sides), report
    f = r.features
    assert f is not None and f.whole_sent > 0 and f.whole_ok == f.whole_sent, report
    assert f.logical_scattered > 0 and f.logical_restored == f.logical_sent, report
    assert r.bands is not None and r.bands.prioritised > 0, report
    assert r.multicast_sent > 0 and r.accounts is not None and r.accounts.expiring_sent > 0
    kinds = {k for k, (_, done) in result.faults.items() if done}
    assert kinds == {
        "unit SIGKILL",
        "unit pause",
        *KINDS,
        "broker SIGKILL",
        "Redis failover",
        "Redis replica pause",
    }, report
    assert result.restarts == {"kafka": 1, "redis": 1}, report
    assert result.violations() == [], report
