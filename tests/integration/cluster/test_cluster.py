"""The management tables on a real Redis Cluster (issue 30, items 1 and 2): three primaries
with one replica each (ops/cluster.sh). Units, the sweeper and the client libraries reach
the tables through redis-py's cluster client (`redis.cluster_nodes`); each table's scripts
run on the primary of its slot, the two sides of a topology on two slots; a primary holding
a table's slot SIGKILLed under load loses, duplicates, reorders and splits nothing.

Judged from what the transfer topic and the receive queues hold (read_committed, with the
broker's append times) against what the senders recorded, never from the router's
counters. The short cases run in `make test`; the SIGKILL runs are `make test-cluster`."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stack.rediscluster import ClusterSet
from ops.harness.traffic.collect import verdict
from ops.harness.traffic.final_read import read_to_end
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.capacity import Disturbance
from ops.harness.verdict.verify import Report
from router.backends.redis.client import redis_client
from router.state.groups import GroupStatus
from router.state.store import StatusStore, find_group
from router.table.store.codec import TableKeys
from tests.fixtures.factories import ClusterPipelineFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.judged import Arrivals, assert_whole, finish, log_marks, logged_since, send

pytestmark = pytest.mark.slow

SHORT = PipelineSpec(
    send_units=1,
    receive_units=1,
    send_queues=1,
    send_queue_partitions=2,
    transfer_partitions=2,
    receive_queues=3,
)


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- short (make test)


def test_a_topologys_two_sides_live_on_two_slots(whole_cluster: ClusterSet) -> None:
    """Every key of a table is in one slot (CLUSTER KEYSLOT, as the nodes compute it), and
    the send and receive tables of one topology are in two different ones."""
    slots = {}
    for side in ("send", "receive"):
        keys = TableKeys.of("router", "shop", side).all()
        found = {whole_cluster.keyslot(k) for k in keys}
        assert len(found) == 1, f"{side}: {len(found)} slots"
        slots[side] = found.pop()
    assert slots["send"] != slots["receive"], slots


def test_state_and_scans_reach_every_primary(whole_cluster: ClusterSet) -> None:
    """The client libraries' state (one hash tag per sender or consumer group) spreads over
    the primaries, and `router table show`'s scan finds it on each of them."""
    prefix = unique("router-test")
    settings = whole_cluster.redis_settings()
    stores = [StatusStore(settings, f"billing-{i}", prefix) for i in range(12)]
    status = GroupStatus("A", "shop.recv.2", 0, 17, 4, False, 5)
    for store in stores:
        store.write([status])
    owners = {whole_cluster.owner(s.groups_key) for s in stores}
    assert len(owners) >= 2, f"12 consumer groups' keys all on node(s) {owners}"
    _, receivers = find_group(settings, "A", prefix)
    assert receivers == {f"billing-{i}": status for i in range(12)}
    client: Any = redis_client(settings)
    for s in stores:
        client.delete(s.groups_key, s.done_key)


def test_grouped_traffic_through_both_sides_on_the_cluster(
    cluster_pipeline: ClusterPipelineFactory, whole_cluster: ClusterSet
) -> None:
    """A few hundred messages in groups through a send unit, a receive unit and the
    sweeper, every table on the cluster, with WAIT for one replica on the table's node:
    every one arrives, once, in order, no group split; the tables are on their slots'
    primaries."""
    p = cluster_pipeline(SHORT, min_replica_acks=1, replica_ack_timeout_ms=500)
    collector = Arrivals(p)
    try:
        sent = send(p, "a", 300)
        assert collector.wait_for(len(sent.sent), 90), f"{collector.count()} of 300 arrived"
    finally:
        collector.stop()
    for side in ("send", "receive"):
        key = TableKeys.of("router-test", p.name, side).entries
        node = whole_cluster.owner(key)
        assert node is not None
        direct: Any = whole_cluster.node_client(node)
        assert direct.exists(key) or direct.hlen(key) == 0  # answered there, no MOVED
    send_side, receive = finish(p)
    assert_whole(verdict(sent.sent, send_side, receive), 300)


# ---------------------------------------------------------------- heavy (make test-cluster)

# the units' back-off reason (router.unit.commit.replica_acks)
REFUSED = "required Redis replicas acknowledged"


@pytest.mark.cluster
def test_units_wait_for_the_replica_of_their_tables_node(
    cluster_pipeline: ClusterPipelineFactory, whole_cluster: ClusterSet
) -> None:
    """min_replica_acks=1, the replica of the primary holding the send table's slot paused
    (SIGSTOP): the send unit forwards nothing sent meanwhile (its WAIT runs on that primary:
    on any other node it would be answered), and once the replica goes on, everything
    arrives, whole."""
    p = cluster_pipeline(SHORT, min_replica_acks=1, replica_ack_timeout_ms=300)
    units = list(p.fleet.procs)
    collector = Arrivals(p)
    try:
        before = send(p, "a", 80)
        assert collector.wait_for(len(before.sent), 90), "groups routed on the cluster"
        owner = whole_cluster.owner(TableKeys.of("router-test", p.name, "send").entries)
        assert owner is not None
        replica = whole_cluster.replica_of(owner)
        assert replica is not None, f"node {owner} has no replica online"
        marks = log_marks(p)
        whole_cluster.pause(replica)
        try:
            during = send(p, "b", 80)
            wait_until(
                lambda: logged_since(p, marks, "send-unit", REFUSED) >= 3,
                60,
                "the send unit to be refused three times",
                report=lambda: "\n".join(x.tail(20) for x in p.fleet.procs),
            )
            stalled = collector.count()
        finally:
            whole_cluster.resume(replica)
        assert stalled == len(before.sent), "forwarded while no replica acknowledged"
        total = len(before.sent) + len(during.sent)
        assert collector.wait_for(total, 120), f"{collector.count()} of {total} after resuming"
    finally:
        collector.stop()
    assert all(x.alive for x in units) and p.fleet.procs == units, "units died or were replaced"
    send_side, receive = finish(p)
    assert_whole(verdict(before.sent + during.sent, send_side, receive), total)


MID_RUN = PipelineSpec(send_units=2, receive_units=2, transfer_partitions=4, receive_queues=4)


@dataclass
class Failover:
    side: str = ""
    killed: int = 0
    promoted: int = 0
    failover_s: float = 0.0  # the kill -> another node is primary for the table's slot
    whole_s: float = 0.0  # the kill -> the killed node back as a replica, online
    events: Counter[str] = field(default_factory=Counter)
    dead_letters: int = 0


def run_with_primary_kill(
    p: Pipeline, c: ClusterSet, side: str, messages: int, kill_at: int
) -> tuple[Report, Failover]:
    """The workload through `p`; once `kill_at` records arrived, the primary holding
    `side`'s table is SIGKILLed, its replica takes over, the killed node comes back as a
    replica. Nothing but the cluster is touched: the units find the new primary themselves."""
    units = list(p.fleet.procs)
    key = TableKeys.of(p.settings.redis.key_prefix, p.name, side).entries  # type: ignore[arg-type]
    workload = WorkloadSpec(run_id=p.name, senders=4, messages=messages, rate=60, max_group=30)
    collector = Arrivals(p)
    senders = Senders(p.settings, workload)
    senders.start()
    f = Failover(side)
    try:
        wait_until(lambda: collector.count() >= kill_at, 300, f"{kill_at} records received")
        owner = c.owner(key)
        assert owner is not None
        t0, start_ms = time.monotonic(), epoch_ms()
        c.kill(owner)
        f.killed = owner
        f.promoted = c.wait_failover(key, owner, timeout=60)
        f.failover_s = round(time.monotonic() - t0, 1)
        c.start(owner)  # rejoins as the new primary's replica
        c.wait_whole(timeout=60)
        f.whole_s = round(time.monotonic() - t0, 1)
        end_ms = epoch_ms()
        assert senders.join(timeout=600), f"senders did not finish ({senders.attempted})"
        assert senders.failures == [], senders.failures[:3]
        assert collector.wait_for(len(senders.sent), 300), (
            f"{collector.count()} of {len(senders.sent)} arrived"
        )
    finally:
        senders.stop()
        collector.stop()
    assert all(x.alive for x in units) and p.fleet.procs == units, "units died or were replaced"
    send_side, receive = finish(p)
    recover_ms = p.settings.kafka.transaction_timeout_ms + p.settings.unit.backoff_max_ms
    failover = Disturbance(start_ms, end_ms, recover_ms, None, "Redis Cluster primary SIGKILLed")
    report = verdict(senders.sent, send_side, receive, disturbances=[failover])
    t = p.settings.topology
    rest = read_to_end(
        p.settings.kafka,
        {
            "events": TopicPartition(t.events_topic, 0),
            "dlq": TopicPartition(t.dead_letter_topic, 0),
        },
    )
    f.events = Counter(dict(m.headers() or []).get("schema", b"?").decode() for m in rest["events"])
    f.dead_letters = len(rest["dlq"])
    return report, f


@pytest.mark.cluster
@pytest.mark.parametrize("side", ["send", "receive"])
def test_a_primary_sigkilled_mid_run_loses_nothing(
    cluster_pipeline: ClusterPipelineFactory, whole_cluster: ClusterSet, side: str
) -> None:
    """min_replica_acks=1: WAIT on the table's node before every commit. The primary of
    the `side` table's slot SIGKILLed after 1,200 of 4,000 messages arrived."""
    p = cluster_pipeline(MID_RUN, min_replica_acks=1, replica_ack_timeout_ms=500)
    report, f = run_with_primary_kill(p, whole_cluster, side, messages=4000, kill_at=1200)
    print(f"cluster, min_replica_acks=1: {f}\nverdict: {report.violations() or 'whole'} {report}")
    assert_whole(report, 4000)
    assert report.violations() == []
    assert f.dead_letters == 0, "a continuation found its group's entry gone (dead-lettered)"


@pytest.mark.cluster
def test_a_primary_sigkilled_mid_run_without_min_replica_acks_is_reported(
    cluster_pipeline: ClusterPipelineFactory, whole_cluster: ClusterSet
) -> None:
    """Asynchronous replication alone: a lost write is seen by the write counter (a table
    reset) or not at all; what the failover cost is printed, not asserted."""
    p = cluster_pipeline(MID_RUN)
    report, f = run_with_primary_kill(p, whole_cluster, "send", messages=4000, kill_at=1200)
    print(
        f"cluster, min_replica_acks=0: {f}\nverdict: lost={report.lost} "
        f"duplicated={report.duplicated} reordered={report.reordered} "
        f"split={report.split_groups} violations={report.violations()}"
    )
    assert report.sent == 4000
