"""Groups resumed after a crash (issue 12, item 2), against the real broker, Redis and unit
processes: a sending process SIGKILLed in the middle of 50 open groups, restarted under
its sender ID, finishes them all; and a receiver's group statuses survive its restart."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import defaultdict
from typing import IO

import redis
from confluent_kafka import TopicPartition

from ops.harness.stack.pipeline import PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from router.contract import FINAL, GUARANTEE_ID, SEQ
from router.receiver import Receiver
from router.sender import Sender
from tests.fixtures.crashing_sender import size
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.paths import ROOT
from tests.fixtures.queues import Queues

GROUPS = 50
SPEC = PipelineSpec(
    send_units=1,
    receive_units=1,
    sweepers=0,
    send_queues=2,
    send_queue_partitions=3,
    transfer_partitions=2,
    receive_queues=4,
)


def _sender(phase: str, args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.crashing_sender", phase, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines_until(out: IO[str], last: str) -> list[str]:
    lines = []
    for line in out:
        lines.append(line.strip())
        if line.strip() == last:
            return lines
    raise AssertionError(f"the sending process ended before {last!r}: {lines[-5:]}")


def test_a_sender_killed_mid_groups_resumes_them_under_its_id(
    pipeline: PipelineFactory, redis_url: str, redis_prefix: str
) -> None:
    """A process opens 50 groups under a sender ID (member 0 of each, then member 1 of
    half of them acknowledged, and of the other half still buffered) and is SIGKILLed.
    Restarted with the same ID, it lists the 50 groups on the lanes it had chosen and
    finishes each from its next number. On the receive queues (read_committed, to their
    end once the units stopped) every group is complete, numbered 0..n-1 without a
    duplicate, on one queue, and the dead-letter topic is empty."""
    p = pipeline(SPEC, start=False)
    p.start(ready_timeout=240)  # a loaded machine: the units take long to join
    s = p.settings
    args = [s.kafka.bootstrap_servers, s.topology.name, unique("sender"), redis_url]
    args += [redis_prefix, str(GROUPS)]
    first = _sender("open", args)
    assert first.stdout is not None
    lines = _lines_until(first.stdout, "MID")
    first.send_signal(signal.SIGKILL)
    assert first.wait(30) == -signal.SIGKILL
    lanes = {w[1]: (w[2], int(w[3])) for w in (line.split() for line in lines) if w[0] == "LANE"}
    assert len(lanes) == GROUPS

    second = _sender("finish", args)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err[-3000:]
    resumed = {
        w[1]: w[2:] for w in (line.split() for line in out.splitlines()) if w[0] == "RESUMED"
    }
    assert set(resumed) == set(lanes), "every open group listed after the restart"
    for gid, (topic, partition, next_seq) in resumed.items():
        assert (topic, int(partition)) == lanes[gid], f"{gid} resumed on its lane"
        i = int(gid[1:])
        # member 1 of the first half was acknowledged; of the second half it was lost
        assert int(next_seq) == (2 if i < GROUPS // 2 else 1), gid
    assert out.splitlines()[-1] == "DONE"

    expected = sum(size(i) for i in range(GROUPS))
    Queues(s).read_until(expected, timeout=120)
    p.stop()
    parts = {q: TopicPartition(q, 0) for q in s.topology.receive_queues}
    parts["dlq"] = TopicPartition(s.topology.dead_letter_topic, 0)
    held = read_to_end(s.kafka, parts)
    assert held.pop("dlq") == []
    where: dict[str, set[str]] = defaultdict(set)
    members: dict[str, list[tuple[int, bool, bytes]]] = defaultdict(list)
    for queue, records in held.items():
        for m in records:
            h = dict(m.headers() or [])
            gid = h[GUARANTEE_ID].decode()
            where[gid].add(queue)
            members[gid].append((int(h[SEQ]), h.get(FINAL) == b"true", m.value()))
    assert sorted(members) == sorted(lanes)
    for gid, got in members.items():
        n = size(int(gid[1:]))
        assert len(where[gid]) == 1, f"{gid} on {where[gid]}"
        assert got == [(q, q == n - 1, f"{gid}:{q}".encode()) for q in range(n)], gid


def test_a_receivers_group_status_survives_its_restart(
    pipeline: PipelineFactory, redis_url: str, redis_prefix: str
) -> None:
    """A receiver with `state` marks two of a group's three members done and closes; a new
    receiver of the same consumer group reads the status (last seq 1, not complete), is
    handed the third member, and the group is then complete; an ordinary message has no
    status."""
    p = pipeline(SPEC, start=False)
    p.start(ready_timeout=240)  # a loaded machine: the units take long to join
    s = p.settings
    kafka = {"bootstrap.servers": s.kafka.bootstrap_servers}
    with Sender(kafka, s.topology.name) as sender:
        for seq in range(3):
            sender.send(f"o:{seq}".encode(), guarantee_id="order-1", final=seq == 2)
    conf = {**kafka, "group.id": unique("app"), "enable.auto.commit": False}
    state = redis.Redis.from_url(redis_url)

    def receiver() -> Receiver:
        return Receiver(conf, s.topology.name, state=state, state_prefix=redis_prefix)

    with receiver() as r:
        got = wait_until(lambda: r.poll(0.5), 90, "the first member")
        r.done(got)
        second = wait_until(lambda: r.poll(0.5), 30, "the second member")
        r.done(second)
        status = r.group_status("order-1")
        assert status is not None and (status.last_seq, status.complete) == (1, False)
    with receiver() as r:
        status = r.group_status("order-1")
        assert status is not None and (status.last_seq, status.complete) == (1, False)
        third = wait_until(lambda: r.poll(0.5), 60, "the third member")
        assert third.seq == 2
        r.done(third)
        status = r.group_status("order-1")
        assert status is not None and (status.last_seq, status.complete, status.done_count) == (
            2,
            True,
            3,
        )
        assert set(r.group_statuses()) == {"order-1"}
    state.close()
