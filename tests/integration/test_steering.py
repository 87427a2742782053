"""Steering a running pipeline (`router table drain|pin`), judged from where the messages
landed: every transfer partition (the send side's destinations) and every receive queue
(the receive side's) read back with read_committed, never the router's counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from ops.harness.pipeline import Pipeline, PipelineSpec
from router.contract import headers_for
from tests.conftest import PipelineFactory
from tests.helpers import unique, wait_until

SPEC = PipelineSpec(
    send_units=1,
    receive_units=1,
    sweepers=0,
    send_queues=1,
    send_queue_partitions=1,
    transfer_partitions=3,
    receive_queues=3,
    busy_policy="share",
)


def router_table(p: Pipeline, *args: str) -> dict[str, Any]:
    """`router table ARGS --json` as an operator runs it, against the pipeline."""
    done = subprocess.run(
        [sys.executable, "-m", "router", "table", *args, "--json"],
        env={**os.environ, **p.env, "ROUTER_CONFIG": str(p.fleet.config_file)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    data: dict[str, Any] = json.loads(done.stdout)
    return data


class Landed:
    """Where each payload landed: its transfer partition and its receive queue."""

    def __init__(self, p: Pipeline) -> None:
        t = p.settings.topology
        self.transfer = t.transfer_topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": p.settings.kafka.bootstrap_servers,
                "group.id": unique("landed"),
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        parts = [TopicPartition(self.transfer, i, OFFSET_BEGINNING) for i in range(3)]
        parts += [TopicPartition(q, 0, OFFSET_BEGINNING) for q in t.receive_queues]
        self.consumer.assign(parts)
        self.partition: dict[bytes, int] = {}
        self.queue: dict[bytes, str] = {}

    def until(self, values: list[bytes], timeout: float = 120) -> None:
        def all_seen() -> bool:
            for m in self.consumer.consume(500, 0.5):
                if m.error() is None and m.value() is not None:
                    if m.topic() == self.transfer:
                        self.partition[m.value()] = m.partition()
                    else:
                        self.queue[m.value()] = m.topic()
            return all(v in self.partition and v in self.queue for v in values)

        wait_until(
            all_seen,
            timeout,
            f"{len(values)} messages on both sides",
            report=lambda: f"missing: {[v for v in values if v not in self.queue][:10]}",
        )


def test_a_drained_destination_takes_no_new_group_and_a_pinned_group_lands_there(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(SPEC)
    (queue,) = p.settings.topology.send_queues
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers})
    landed = Landed(p)
    # A group opens; then its destinations on both sides are drained.
    producer.produce(queue, b"open-0", partition=0, headers=headers_for("OPEN", seq=0))
    producer.flush(10)
    landed.until([b"open-0"])
    partition, receive_queue = landed.partition[b"open-0"], landed.queue[b"open-0"]
    drained = router_table(p, "drain", str(partition), "--side", "send", "--yes")
    assert drained["status"]["open_groups"] == ["OPEN"]
    drained = router_table(p, "drain", receive_queue, "--side", "receive", "--yes")
    assert drained["status"]["open_groups"] == ["OPEN"]
    # A new group pinned to the drained destinations: only the pin can put it there.
    router_table(p, "pin", "PIN", str(partition), "--side", "send", "--yes")
    router_table(p, "pin", "PIN", receive_queue, "--side", "receive", "--yes")

    groups, ordinary = [], []
    for i in range(12):
        for seq in range(2):
            value = f"g{i}-{seq}".encode()
            headers = headers_for(f"G{i}", seq=seq, final=seq == 1)
            producer.produce(queue, value, partition=0, headers=headers)
            groups.append(value)
        value = f"o{i}".encode()
        producer.produce(queue, value, partition=0, headers=headers_for(None))
        ordinary.append(value)
    pinned = [b"pin-0", b"pin-1"]
    producer.produce(queue, pinned[0], partition=0, headers=headers_for("PIN", seq=0))
    producer.produce(queue, b"open-1", partition=0, headers=headers_for("OPEN", seq=1, final=True))
    producer.produce(queue, pinned[1], partition=0, headers=headers_for("PIN", seq=1, final=True))
    producer.flush(10)
    landed.until([*groups, *ordinary, *pinned, b"open-1"])

    on_drained = [
        v
        for v in groups + ordinary
        if landed.partition[v] == partition or landed.queue[v] == receive_queue
    ]
    assert not on_drained, f"placed on drained {partition}/{receive_queue}: {on_drained}"
    assert {landed.partition[v] for v in groups + ordinary} == {0, 1, 2} - {partition}
    assert len({landed.queue[v] for v in groups + ordinary}) == 2
    for v in [b"open-0", b"open-1", *pinned]:  # the open group finished where it was,
        assert (landed.partition[v], landed.queue[v]) == (partition, receive_queue), v
    # ... and once both groups are released, the drain has nothing left to wait for.
    for side, dest in (("send", str(partition)), ("receive", receive_queue)):
        done = router_table(p, "drain", dest, "--side", side, "--yes", "--wait", "--timeout", "60")
        assert done["status"]["idle"] is True and done["status"]["open_groups"] == []
        router_table(p, "undrain", dest, "--side", side, "--yes")
    landed.consumer.close()
