"""A late rebalance callback fences the partition's next owner (issue 32, the zombie fence of
`router/table/store/owners.py`). A send unit freezes (SIGSTOP, fault point `in_assign`) after
its consumer was assigned partitions and before its callback claimed them in the table. Its
session ends; the other unit is assigned everything, claims it and routes. When the frozen
unit resumes, its stale callback claims the partitions with newer tokens than the owner's:
before the table fence asked the group's coordinator, the owner's route calls were
refused (`lanes_fenced`) for the partitions it kept after the next rebalance, until the
claims healed (twice the consumer session), and traffic sent after the resume on those
partitions was not delivered meanwhile. Now a unit claims only what the coordinator
confirms it holds (`router.unit.membership`): the late callback claims nothing, and an
owner fenced by a late claim anyway asks again and claims back. About a minute."""

from __future__ import annotations

import os
import signal

import pytest

from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.workload import WorkloadSpec
from router.backends.redis.client import redis_client
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import stopped, unique, wait_until
from tests.fixtures.zombies import receive_side_running

pytestmark = [pytest.mark.slow, pytest.mark.faults]

DELIVERY_S = 30.0  # well past a rebalance and a back-off


def test_a_late_assignment_callback_does_not_stall_the_next_owner(
    pipeline: PipelineFactory,
) -> None:
    p = receive_side_running(pipeline)
    client = redis_client(p.settings.redis)
    table = table_for(p.settings, "send", client)
    late = p.fleet.start("send-unit", env={"ROUTER_FAULTS": "in_assign=1*1"})[0]
    wait_until(lambda: stopped(late.popen.pid), 60, "the unit to freeze in its first callback")
    owner = p.fleet.start("send-unit")[0]
    # The late unit's session ends; the owner is assigned every partition and claims it.
    # (send queue and room partitions: 8 lanes)
    wait_until(lambda: len(table.owners()) == 8, 60, "the owner to claim every partition")
    claimed = table.owners()
    os.kill(late.popen.pid, signal.SIGCONT)
    wait_until(lambda: table.owners() != claimed, 30, "the resumed callback to claim")
    workload = WorkloadSpec(
        run_id=p.name, senders=2, messages=600, rate=300, max_group=6, open_per_sender=2
    )
    collector = Collector(p.settings, group_id=unique("checker"))
    collector.start()
    senders = Senders(p.settings, workload)
    senders.start()
    assert senders.join(timeout=60), "senders did not finish"
    assert late.alive and owner.alive
    delivered = collector.wait_for(len(senders.sent), timeout=DELIVERY_S)
    fenced = "claimed by another unit" in owner.tail(400)
    collector.stop()
    codes = p.stop()
    assert all(code == 0 for code in codes.values()), codes
    assert not fenced, "the owner's route calls were refused after the late claim"
    assert delivered, f"received {collector.count()} of {len(senders.sent)} within {DELIVERY_S} s"
