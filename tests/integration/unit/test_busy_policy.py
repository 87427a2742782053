"""When every destination is in charge of an open group: the configured policy applies.

One transfer partition and one receive queue, so a single open group makes everything busy.
"""

from __future__ import annotations

from router.backends.redis.client import redis_client
from router.contract import headers_for
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import wait_until
from tests.fixtures.queues import one_way


def test_hold_keeps_an_ordinary_message_out_of_an_open_group(pipeline: PipelineFactory) -> None:
    _, s, producer, queue = one_way(pipeline, "hold")
    a, b = s.topology.send_queues
    producer.produce(a, b"A0", partition=0, headers=headers_for("A", seq=0))
    producer.flush(10)
    queue.until(b"A0")
    producer.produce(b, b"o", partition=0, headers=headers_for(None))
    producer.flush(10)
    send_table = table_for(s, "send", redis_client(s.redis))
    wait_until(lambda: send_table.stats().get("held", 0) > 0, 30, "the ordinary message held")
    producer.produce(a, b"A1", partition=0, headers=headers_for("A", seq=1, final=True))
    producer.flush(10)
    # The held message goes out once A's final has freed the destination: after A1.
    assert queue.until(b"A1", b"o") == [b"A0", b"A1", b"o"]
    assert send_table.stats().get("shared", 0) == 0
    queue.receiver.close()


def test_a_hold_that_times_out_is_shared(pipeline: PipelineFactory) -> None:
    _, s, producer, queue = one_way(pipeline, "hold", ROUTER_ROUTING__HOLD_TIMEOUT_MS="1500")
    a, b = s.topology.send_queues
    producer.produce(a, b"B0", partition=0, headers=headers_for("B", seq=0))  # never finished
    producer.flush(10)
    queue.until(b"B0")
    producer.produce(b, b"o", partition=0, headers=headers_for(None))
    producer.flush(10)
    assert queue.until(b"o") == [b"B0", b"o"]
    stats = table_for(s, "send", redis_client(s.redis)).stats()
    assert stats.get("held", 0) > 0 and stats.get("shared", 0) == 1
    queue.receiver.close()


def test_share_places_on_the_busy_destination_and_counts_it(pipeline: PipelineFactory) -> None:
    _, s, producer, queue = one_way(pipeline, "share")
    a, b = s.topology.send_queues
    producer.produce(a, b"C0", partition=0, headers=headers_for("C", seq=0))
    producer.flush(10)
    queue.until(b"C0")
    producer.produce(b, b"o", partition=0, headers=headers_for(None))
    producer.flush(10)
    assert queue.until(b"o") == [b"C0", b"o"]
    client = redis_client(s.redis)
    assert table_for(s, "send", client).stats().get("shared", 0) == 1
    assert table_for(s, "receive", client).stats().get("shared", 0) == 1
    queue.receiver.close()
