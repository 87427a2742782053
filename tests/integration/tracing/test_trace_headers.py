"""A producer's W3C trace context (`traceparent`, `tracestate`) reaches the receive queue
unchanged through both hops: forwarded straight, and through both sides' waiting rooms (the
one destination busy with an open group), whatever the values say (the router reads none
of them to route, and writes none)."""

from __future__ import annotations

from router.contract import headers_for
from router.receiver import Receiver
from router.tracing.context import TRACEPARENT, TRACESTATE
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.queues import one_way


def context(n: int) -> list[tuple[str, bytes]]:
    return [
        (TRACEPARENT, f"00-{n:032x}-{n + 1:016x}-0{n % 2}".encode()),
        (TRACESTATE, f"vendor{n}=v{n},other=x".encode()),
    ]


def test_a_producers_trace_context_reaches_the_receive_queue_unchanged(
    pipeline: PipelineFactory,
) -> None:
    p, s, producer, _ = one_way(pipeline, "wait")
    queue = s.topology.send_queues[0]
    sent: dict[bytes, list[tuple[str, bytes]]] = {}

    def send(
        value: bytes, routing: list[tuple[str, bytes]], trace: list[tuple[str, bytes]]
    ) -> None:
        sent[value] = trace
        producer.produce(queue, value, headers=[*routing, *trace])
        producer.flush(30)

    send(b"a0", headers_for("a", seq=0), context(1))  # opens the only destination
    send(b"b0", headers_for("b", seq=0), context(2))  # waits in the room behind a
    send(b"b1", headers_for("b", seq=1, final=True), context(3))
    send(b"o", [], context(4))  # an ordinary message, waits behind a too
    # not a valid context: carried as it is all the same
    send(b"odd", [], [(TRACEPARENT, b"not-a-traceparent"), (TRACESTATE, b"\xff")])
    send(b"a1", headers_for("a", seq=1, final=True), context(5))  # frees it

    got: dict[bytes, list[tuple[str, bytes | None]]] = {}
    with Receiver.from_settings(s, group_id=unique("check"), assign=True) as receiver:

        def all_arrived() -> bool:
            m = receiver.poll(0.2)
            if m is not None and m.value is not None:
                got[m.value] = [h for h in m.headers if h[0] in (TRACEPARENT, TRACESTATE)]
            return set(got) == set(sent)

        wait_until(all_arrived, 90, f"{sorted(sent)} on the receive queue")
    assert got == sent

    def parked() -> int:  # the room path was taken: b0, b1 and o waited behind a
        return p.unit_metrics().get("send-unit", {}).get("room_parked", 0)

    assert wait_until(lambda: parked() >= 3, 30, "the send unit's room_parked published")
