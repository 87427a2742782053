"""The patent's worked example (JP6277680B2, figures 17-25), end to end on Kafka and Redis.

Two send queues (A1 <- sender of group X; A2 <- senders of group Y and of ordinary message
"1"), two send units, three receive-side units (transfer partitions), three receive
queues, all as separate processes. The patent's sequence: X1; then X2 and Y1; then "1"
and X3 (final). The patent routes "1" while X is still in the table, so here "1" is sent
before X3 (the final) and X3 only after "1" has arrived.

Placement asserted, as the patent describes it: X1..X3 take one receive-side unit and one
receive queue, in order; Y1 takes another unit and another queue; "1" takes the third
unit and the third queue, so neither Y1 nor "1" enters X's path. X's entries are removed
from both tables after its final; Y's stay (Y has no final yet).
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from ops.harness.stack.pipeline import PipelineSpec
from router.backends.redis.client import redis_client
from router.contract import headers_for
from router.receiver import Receiver
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until


def test_patent_figures_17_to_25(pipeline: PipelineFactory) -> None:
    p = pipeline(
        PipelineSpec(
            send_units=2,
            receive_units=3,
            sweepers=0,
            send_queues=2,
            send_queue_partitions=1,
            transfer_partitions=3,
            receive_queues=3,
        )
    )
    topo = p.settings.topology
    a1, a2 = topo.send_queues
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers})
    receiver = Receiver.from_settings(p.settings, group_id=unique("patent-check"), assign=True)
    arrived: dict[bytes, tuple[str, int]] = {}

    def send(queue: str, value: bytes, gid: str | None, final: bool = False) -> None:
        producer.produce(queue, value, partition=0, headers=headers_for(gid, final=final))
        producer.flush(10)

    def until_arrived(*values: bytes) -> None:
        def done() -> bool:
            m = receiver.poll(0.2)
            if m is not None and m.value is not None:
                arrived[m.value] = (m.topic, m.offset)
            return all(v in arrived for v in values)

        wait_until(done, 60, f"{values} on the receive queues")

    send(a1, b"X1", "X")
    until_arrived(b"X1")
    send(a1, b"X2", "X")
    send(a2, b"Y1", "Y")
    until_arrived(b"X2", b"Y1")
    send(a2, b"1", None)
    until_arrived(b"1")
    send(a1, b"X3", "X", final=True)
    until_arrived(b"X3")
    receiver.close()

    qx, qy, q1 = arrived[b"X1"][0], arrived[b"Y1"][0], arrived[b"1"][0]
    assert arrived[b"X2"][0] == qx and arrived[b"X3"][0] == qx
    assert arrived[b"X1"][1] < arrived[b"X2"][1] < arrived[b"X3"][1]
    assert len({qx, qy, q1}) == 3, arrived

    # The send side: each of X, Y and "1" went through its own receive-side unit.
    via = transfer_partitions(p.settings.kafka.bootstrap_servers, topo.transfer_topic, 5)
    assert via[b"X1"] == via[b"X2"] == via[b"X3"]
    assert len({via[b"X1"], via[b"Y1"], via[b"1"]}) == 3, via

    # X is released in both tables after its final; Y is still open on its unit and queue.
    client = redis_client(p.settings.redis)

    def x_released() -> bool:
        return all(
            set(table_for(p.settings, side, client).entries()) == {"Y"}
            for side in ("send", "receive")
        )

    wait_until(x_released, 30, "X's entries to be released after its final")
    assert table_for(p.settings, "send", client).entries()["Y"].dest == str(via[b"Y1"])
    assert table_for(p.settings, "receive", client).entries()["Y"].dest == qy


def transfer_partitions(bootstrap: str, topic: str, expected: int) -> dict[bytes, int]:
    """Which transfer partition (receive-side unit) each value went through."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("transfer-check"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    via: dict[bytes, int] = {}

    def done() -> bool:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            via[m.value()] = m.partition()
        return len(via) >= expected

    try:
        wait_until(done, 30, "the transfer topic to be read")
    finally:
        consumer.close()
    return via
