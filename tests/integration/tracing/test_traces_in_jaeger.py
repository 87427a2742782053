"""A group through the pipeline with tracing on, read back from a real Jaeger (ops/jaeger.sh
builds it from the Go module proxy): each message's trace holds its hops in order, the
Sender's producer span, the send unit's, the receive unit's and the Receiver's, the units'
and the Receiver's spans children of the Sender's; a group that waited in the send side's
waiting room shows it (a span parking it, then one draining it). Skipped, saying why, only
where Jaeger cannot be built."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops.harness.stack.jaeger import Jaeger, JaegerMissing
from ops.harness.stack.pipeline import PipelineSpec
from router.receiver import Receiver
from router.sender import Sender
from router.tracing.context import parent_of
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.queues import ONE_WAY

HOPS = ("router-sender", "router-send-unit", "router-receive-unit", "router-receiver")


@pytest.fixture
def jaeger(tmp_path: Path) -> Iterator[Jaeger]:
    try:
        server = Jaeger.start(tmp_path / "jaeger")
    except JaegerMissing as exc:
        pytest.skip(f"Jaeger cannot be built here (ops/jaeger.sh ensure): {exc}")
    with server:
        yield server


def tag(span: dict[str, Any], key: str) -> Any:
    return next((t["value"] for t in span.get("tags", ()) if t["key"] == key), None)


def test_a_groups_traces_hold_every_hop_in_order(jaeger: Jaeger, pipeline: PipelineFactory) -> None:
    env = {
        "ROUTER_TRACING__ENABLED": "true",
        "ROUTER_TRACING__OTLP_ENDPOINT": jaeger.otlp_endpoint,
    }
    quick = {"OTEL_BSP_SCHEDULE_DELAY": "200"}  # the units export within 0.2 s, not 5 s
    spec = PipelineSpec(
        busy_policy="wait",
        **ONE_WAY,  # type: ignore[arg-type]
        extra_env=env,
        role_env={"send-unit": quick, "receive-unit": quick},
    )
    p = pipeline(spec)
    s = p.settings
    assert s.tracing.enabled
    received: dict[bytes, str] = {}  # value -> its trace ID, as the Receiver got it
    with Sender.from_settings(s) as sender:
        sender.send(b"a0", guarantee_id="a")  # holds the one destination of each side
        sender.send(b"b0", guarantee_id="b")  # waits in the room behind a
        sender.send(b"b1", guarantee_id="b", final=True)
        sender.flush()
        sender.send(b"a1", guarantee_id="a", final=True)
    with Receiver.from_settings(s, group_id=unique("traced"), assign=True) as receiver:

        def handle(m: Any) -> None:
            parent = parent_of(m.headers)
            received[m.value] = f"{parent.trace_id:032x}" if parent and parent.sampled else ""

        def all_arrived() -> bool:
            receiver.process(handle, idle_timeout=0.5, max_messages=4)
            return len(received) == 4

        wait_until(all_arrived, 90, "the four messages on the receive queue")
    assert "" not in received.values(), "every message arrived with a sampled traceparent"
    assert len(set(received.values())) == 4, "a trace per message"

    def trace_of(value: bytes) -> list[dict[str, Any]] | None:
        spans = jaeger.trace(received[value])
        services = {sp["service"] for sp in spans or ()}
        kinds = {sp["operationName"].split()[0] for sp in spans or ()}
        whole = set(HOPS) <= services and {"send", "route", "receive", "process"} <= kinds
        return spans if whole and (value != b"b0" or "drain" in kinds) else None

    spans = wait_until(lambda: trace_of(b"a1"), 30, "a1's trace in Jaeger with every hop")
    firsts = {}
    for sp in sorted(spans, key=lambda x: x["startTime"]):
        firsts.setdefault(sp["service"], sp)
    assert list(firsts) == list(HOPS), [(x["service"], x["operationName"]) for x in spans]
    sent = firsts["router-sender"]
    assert sent["operationName"].removeprefix("send ") in s.topology.send_queues
    for sp in spans:
        if sp is not sent and sp["operationName"].split()[0] in ("route", "receive"):
            refs = {(r["refType"], r["spanID"]) for r in sp["references"]}
            assert ("CHILD_OF", sent["spanID"]) in refs, sp  # the producer's context, unchanged
    send_hop, receive_hop = firsts["router-send-unit"], firsts["router-receive-unit"]
    assert tag(send_hop, "router.outcome") == "forwarded"
    assert tag(send_hop, "router.destination") == "0"
    assert tag(send_hop, "router.final") is True and tag(send_hop, "router.guarantee_id") == "a"
    assert tag(receive_hop, "router.outcome") == "forwarded"
    assert tag(receive_hop, "router.destination") == s.topology.receive_queues[0]

    waited = wait_until(lambda: trace_of(b"b0"), 30, "b0's trace in Jaeger, drained")
    send_side = sorted(
        (x for x in waited if x["service"] == "router-send-unit"), key=lambda x: x["startTime"]
    )
    outcomes = [tag(x, "router.outcome") for x in send_side]
    assert outcomes[:2] == ["waiting-room", "drained"], outcomes
