"""A zombie's stale batch is fenced in the table (`router/table/store/owners.py`): a send unit
freezes itself (SIGSTOP, fault point `before_route`) holding a batch it polled and has not
routed; its consumer session ends, another unit takes its partitions over, replays the
batch from the committed offsets and delivers everything. Then the zombie resumes and asks
the table to route its stale batch: the call is refused (its claim on the partition is
older), so it re-creates no entry of a group that was delivered and released. Judged from
the receive queues (nothing lost, duplicated, reordered, split or interleaved) and from the
tables: no entry is left once every group ended. Without the fence the zombie's call
re-created entries that nobody would ever release (found by `test_paused_units`)."""

from __future__ import annotations

import os
import signal

from ops.harness.traffic.collect import read_sides, verdict
from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.capacity import LOADED_RELEASE_SLACK_MS
from router.backends.redis.client import redis_client
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import stopped, unique, wait_until
from tests.fixtures.zombies import receive_side_running


def test_a_zombie_resumed_with_a_stale_batch_changes_nothing_in_the_table(
    pipeline: PipelineFactory,
) -> None:
    p = receive_side_running(pipeline)
    workload = WorkloadSpec(
        run_id=p.name, senders=2, messages=1200, rate=400, max_group=8, open_per_sender=2
    )
    collector = Collector(p.settings, group_id=unique("checker"))
    collector.start()
    senders = Senders(p.settings, workload)
    senders.start()
    assert senders.join(timeout=120), "senders did not finish"
    # The zombie-to-be starts alone on a full send queue: its first batch is a big one,
    # with the first members of many groups. It freezes holding it, before routing it.
    zombie = p.fleet.start("send-unit", env={"ROUTER_FAULTS": "before_route=1*1"})[0]
    wait_until(lambda: stopped(zombie.popen.pid), 60, "the zombie to freeze at its first batch")
    p.fleet.start("send-unit")  # takes the partitions over once the zombie's session ended
    try:
        # The other unit took the zombie's partitions over and delivered its batch too.
        assert collector.wait_for(len(senders.sent), timeout=120), (
            f"received {collector.count()} of {len(senders.sent)}"
        )
    finally:
        os.kill(zombie.popen.pid, signal.SIGCONT)
    # Its stale batch fails (refused by the table, or else by Kafka): it backs off.
    wait_until(
        lambda: "backing off" in zombie.tail(200).split("resumed after SIGSTOP", 1)[-1],
        60,
        "the zombie's stale batch to fail",
    )
    assert zombie.alive, "the zombie died"
    client = redis_client(p.settings.redis)
    for side in ("send", "receive"):  # read now: the zombie's call has been answered
        table = table_for(p.settings, side, client)
        wait_until(lambda t=table: t.entries() == {}, 30, f"the {side} table to empty")
    collector.stop()
    codes = p.stop()
    assert all(code == 0 for code in codes.values()), codes
    assert p.stopped_at is not None
    send, receive = read_sides(p.settings, p.stopped_at)
    r = verdict(senders.sent, send, receive, LOADED_RELEASE_SLACK_MS)
    assert senders.failures == [] and send.undecodable == receive.undecodable == 0
    assert r.sent == workload.messages and r.received == r.sent
    assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
    assert r.send is not None and r.receive is not None, "both sides judged"
    assert (r.send.interleaved, r.receive.interleaved) == (0, 0)
    assert r.violations() == []
    for side in ("send", "receive"):
        assert table_for(p.settings, side, client).entries() == {}, f"{side}: entries left"
    assert "claimed by another unit" in zombie.tail(400), "the table did not refuse it"
