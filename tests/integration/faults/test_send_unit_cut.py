"""A SEND unit cut off from the broker (its own Toxiproxy link, ops.harness.stack.netlinks)
for longer than its consumer session while it parks into the send side's waiting room,
and at the same time a receive unit cut off from Redis past its leases, under the default
policy `wait`, then healed; judged as every chaos run is. (With seed 5 the plan puts the
Redis cut on receive-unit.0 and the broker cut on send-unit.0.)

Found (issue 32) on 2026-11-28 in 1 of 5 runs of this very run (then the short test of
`make test`; the fifth run on top of the zombie fence, 250d9c6; the failed one:
chaos-5-32bd16, 1,500 messages, 2 send and 2 receive units, 3 destinations a side): the cut
unit's transaction timed out (AddOffsetsToTxn, and 57 records for `room.send[3]`), its
producer was replaced at the heal, and the rebalance left it only band partitions; the other
send unit, which had taken `room.send[0..3]` and the base partitions when the session
expired, had one transaction fail with ILLEGAL_GENERATION at the rebalance, resumed, and
from then on ran about 16 batches a second with nothing in (`messages_in` flat at 2,636)
while 65 parked records were never drained (`room_parked` 1,168, `room_drained` 1,103): the
sweeper reported groups s0-o14, s0-o16, s0-o21, s2-o14 and s2-o16 waiting in the send room
for more than 120 s, until the stop 2.5 minutes later; the catch-up ended with records
neither delivered nor expired. The other runs passed, and so did 2 runs of a send unit cut
off from the broker alone. The logs of the failed run: .results/netfaults-send-room-stall/
in the clone it was found in (h32n). Not seen since: 16 runs in a row passed on 2026-11-29
(after the coordinator check's fail-open and target-assignment fixes), 5 more on 2026-12-02
(about 40 s each); a run that stalls writes tables-at-stall.json. It runs with
`make test-faults`, not with `make test`, for its time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ops.harness.scenarios.chaos_run import ChaosSpec
from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.toxiproxy import Toxiproxy
from router.config import RouterSettings
from tests.fixtures.chaosruns import assert_clean, run_reported

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def test_a_send_unit_cut_off_from_the_broker_and_a_receive_unit_from_redis_stall_nothing(
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
        net_cut_s=16.0,
        seed=5,
        catch_up_s=150,
    )
    result, _lines, report = run_reported(private_settings, private_stack, spec, tmp_path)
    assert result.net_faults == Counter({"redis-cut": 1, "kafka-cut": 1}), report
    assert_clean(result, report)
