"""Steering a running pipeline (`router table drain|pin`), judged from where the messages
landed: every transfer partition (the send side's destinations) and every receive queue
(the receive side's) read back with read_committed, never the router's counters."""

from __future__ import annotations

from confluent_kafka import Producer

from router.contract import headers_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.steering import SPEC, Landed, router_table


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
