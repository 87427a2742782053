"""The commit overlap at every batch (`unit.overlap_min_batch = 0`: the next batch is
decided while the previous one commits) under the default policy `wait`, with no fault at
all: parked records of the waiting room are dead-lettered instead of delivered.

Open defect, found on 2026-11-28 while attacking carried finals (0f10b8b): in 5 of 6 short
runs (1,500 messages; 3 of 3 with carried finals, 2 of 3 with them switched off, so it is
older than they are) the drain dead-lettered 1 to 7 parked records as `room-late` ("group
... is open with parked messages left") or `group-entry-missing` (a lane's `~` pseudo-group
released with a record still parked); the same runs with the default overlap_min_batch
(100: these small batches never overlap) delivered everything (3 of 3). The overlap is on
by default for batches of 100 messages or more, i.e. under load. Marked strict xfail until
fixed; a run this long has missed it about once in six so far (then it XPASSes)."""

from __future__ import annotations

from collections import Counter

import pytest

from ops.harness.stack.pipeline import PipelineSpec
from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.workload import WorkloadSpec
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique
from tests.fixtures.inprocess import read_records

pytestmark = [pytest.mark.slow, pytest.mark.faults]


@pytest.mark.xfail(
    strict=True,
    reason="open defect: the overlapped commit lets the drain open (or release) a group "
    "with a parked record still to come; it is dead-lettered (room-late, group-entry-missing)",
)
def test_every_batch_overlapping_its_predecessor_dead_letters_nothing(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(
        PipelineSpec(
            send_units=1,
            receive_units=1,
            transfer_partitions=2,
            receive_queues=2,
            extra_env={"ROUTER_UNIT__OVERLAP_MIN_BATCH": "0", "ROUTER_UNIT__BATCH_SIZE": "20"},
        )
    )
    workload = WorkloadSpec(
        run_id=p.name, senders=2, messages=3000, rate=60, max_group=6, open_per_sender=2
    )
    collector = Collector(p.settings, group_id=unique("checker"))
    collector.start()
    senders = Senders(p.settings, workload)
    senders.start()
    assert senders.join(timeout=240), "senders did not finish"
    assert senders.failures == []
    arrived = collector.wait_for(len(senders.sent), timeout=60)
    collector.stop()
    codes = p.stop()
    dead = read_records(p.settings.kafka.bootstrap_servers, p.settings.topology.dead_letter_topic)
    reasons = Counter(dict(h).get("reason", b"?").decode() for _, h in dead)
    assert all(code == 0 for code in codes.values()), codes
    assert reasons == Counter(), f"dead letters without any fault: {dict(reasons)}"
    assert arrived, f"received {collector.count()} of {len(senders.sent)}"
