"""A unit process frozen (SIGSTOP, as a long GC pause or a frozen VM would) past its consumer
session and its leases, then resumed (SIGCONT): a zombie that still believes it owns its
partitions and its batch. Meanwhile the others take its partitions over; when it resumes,
Kafka fences its transaction and the tables' leases have lapsed. Judged from what the
transfer topic and the receive queues hold: nothing lost, duplicated, reordered or split,
no interleaving under the default policy, every process exits 0 at the end, and no table
entry is left behind once every group ended.

Found in 4 of 8 runs on 2026-11-28 before the table fenced zombies: an entry left in a
table after every group ended, a stall, an interleaving. The entries were re-created by a
resumed zombie routing its stale batch; the table now refuses its calls
(`router/table/store/owners.py`; deterministic form: tests/integration/unit/test_zombie_fence.py,
in `make test`). 8 runs in a row passed since. This long form runs with `make test-faults`."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ops.harness.scenarios.demo_run import interleaving_lines
from ops.harness.stack.pipeline import PipelineSpec
from ops.harness.traffic.collect import read_sides, verdict
from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.capacity import LOADED_RELEASE_SLACK_MS
from router.backends.redis.client import redis_client
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.faults]

PAUSE_S = 20.0  # past the session (10 s, ops/stack.sh) and the leases (15 s)


def test_units_frozen_past_their_session_come_back_without_harm(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(
        PipelineSpec(
            send_units=2,
            receive_units=2,
            transfer_partitions=4,
            receive_queues=3,
            extra_env={"ROUTER_KAFKA__TRANSACTION_TIMEOUT_MS": "6000"},
        )
    )
    workload = WorkloadSpec(
        run_id=p.name, senders=3, messages=9000, rate=100, max_group=20, open_per_sender=2
    )
    collector = Collector(p.settings, group_id=unique("checker"))
    collector.start()
    senders = Senders(p.settings, workload)
    senders.start()
    wait_until(lambda: collector.count() > 500, 120, "traffic to flow")
    # Frozen for the middle of the run: traffic goes on for about 10 s after they resume.
    frozen = [p.fleet.running("send-unit")[0], p.fleet.running("receive-unit")[0]]
    for proc in frozen:
        os.kill(proc.popen.pid, signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S)  # the fault itself: how long the processes stay frozen
    finally:
        for proc in frozen:
            os.kill(proc.popen.pid, signal.SIGCONT)
    assert all(proc.alive for proc in frozen), "a frozen process died"
    assert senders.join(timeout=180), "senders did not finish"
    assert collector.wait_for(len(senders.sent), timeout=180), (
        f"received {collector.count()} of {len(senders.sent)}\n"
        + "\n".join(f"--- {x.name}\n{x.tail(15)}" for x in frozen)
    )
    collector.stop()
    codes = p.stop()
    assert all(code == 0 for code in codes.values()), codes
    assert p.stopped_at is not None
    send, receive = read_sides(p.settings, p.stopped_at)
    r = verdict(senders.sent, send, receive, LOADED_RELEASE_SLACK_MS)
    assert senders.failures == [] and send.undecodable == receive.undecodable == 0
    assert r.sent == workload.messages and r.received == r.sent
    assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
    assert r.groups_complete == r.groups_sent
    assert r.send is not None and r.receive is not None, "both sides judged"
    text = "\n".join(interleaving_lines(r, p.shared()))
    assert (r.send.interleaved, r.receive.interleaved) == (0, 0), f"under wait:\n{text}"
    assert r.violations() == []
    # Every group ended and was released: a zombie's stale routing left no entry behind
    # (an open entry would hold its destination until the sweeper's TTL).
    client = redis_client(p.settings.redis)
    for side in ("send", "receive"):
        table = table_for(p.settings, side, client)
        assert table.entries() == {}, f"{side} table: entries left {table.entries()}"
