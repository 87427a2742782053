"""A unit's spans (pure, on OpenTelemetry's SDK in memory): one per traced message of a
committed batch, in the message's trace, naming what became of it."""

from __future__ import annotations

import pytest

from router.config import RouterSettings, TracingSettings
from router.contract.headers import BadInput
from router.contract.parsing import parse
from router.table.multicast import FANOUT
from router.table.room import WAIT
from router.table.routing import ORPHAN, PARKED, SPANS, STOPPING
from router.topology.side import side_spec
from router.tracing.context import TRACEPARENT
from router.unit.spans import UnitSpans, outcome
from router.unit.steps.batch import Batch, Item
from router.unit.steps.emit.records import Output, Record
from tests.fixtures.fakes import msg
from tests.fixtures.tracing import SPAN_ID, TRACE_ID, MemorySpans
from tests.fixtures.tracing import TRACEPARENT as TP

SETTINGS = RouterSettings()
UNSAMPLED = TP[:-2] + b"00"


def item(offset: int, decision: str | None, *, traced: bytes | None = TP, gid: str = "g") -> Item:
    m = msg(
        offset,
        gid,
        seq=offset,
        topic="router.send.1",
        extra=[(TRACEPARENT, traced)] if traced else [],
    )
    headers = m.headers()
    return Item(m, headers, parse(headers, SETTINGS.routing), decision=decision)  # type: ignore[arg-type]


def bad(code: str) -> BadInput:
    error = BadInput(code, "detail")
    error.guarantee_id = "g"
    return error


def test_each_decision_names_its_outcome() -> None:
    assert outcome(item(0, "3")) == ("forwarded", "3", None)
    assert outcome(item(0, WAIT)) == ("waiting-room", None, None)
    assert outcome(item(0, PARKED)) == ("parked", None, "group-stopped")
    assert outcome(item(0, ORPHAN)) == ("parked", None, "group-entry-missing")
    assert outcome(item(0, STOPPING + "2")) == ("parked", None, "group-stopped")
    assert outcome(item(0, SPANS)) == ("dead-lettered", None, "group-spans-partitions")
    assert outcome(item(0, f"{FANOUT}q1,q2|q3")) == ("multicast", "q1,q2,q3", None)
    lettered = item(0, "3")
    lettered.bad = bad("undecodable-payload")
    assert outcome(lettered) == ("dead-lettered", None, "undecodable-payload")
    expired = item(0, None)
    expired.bad = bad("expired")
    assert outcome(expired) == ("expired", None, "expired")
    marker = item(0, "3")
    marker.skip = True
    assert outcome(marker) is None


def test_a_committed_batch_makes_a_span_per_traced_message_in_its_trace() -> None:
    memory = MemorySpans()
    spans = UnitSpans(memory.spans, SETTINGS, side_spec(SETTINGS, "send"))
    batch = Batch("unit-1:7", 0, polled_ns=1_000)
    batch.items = [
        item(0, "3"),
        item(1, WAIT),
        item(2, "3", traced=UNSAMPLED),  # its producer did not sample it: no span
        item(3, "3", traced=None),  # no trace context: no span
    ]
    batch.held_at = {("router.send.1", 0): 1}  # offset 1 held: replayed, no span yet
    assert spans.committed(batch, Output()) == 1
    (span,) = memory.finished()
    assert span.name == "route router.send.1"
    assert span.context.trace_id == TRACE_ID and span.parent is not None
    assert span.parent.span_id == SPAN_ID
    assert span.start_time == 1_000 and span.end_time is not None and span.end_time > 1_000
    attrs = dict(span.attributes or {})
    assert attrs["router.outcome"] == "forwarded" and attrs["router.destination"] == "3"
    assert attrs["router.batch.id"] == "unit-1:7"
    assert attrs["router.guarantee_id"] == "g" and attrs["router.seq"] == 0
    assert attrs["messaging.kafka.offset"] == 0
    assert "router.final" not in attrs and "router.delivery" not in attrs  # the defaults


def test_a_dead_letter_names_its_reason_and_its_groups_poison_policy() -> None:
    memory = MemorySpans()
    spans = UnitSpans(memory.spans, SETTINGS, side_spec(SETTINGS, "send"))
    batch = Batch("b", 0, polled_ns=1)
    lettered = item(0, "3")
    lettered.bad = bad("undecodable-payload")
    batch.items = [lettered]
    assert spans.committed(batch, Output()) == 1
    (span,) = memory.finished()
    attrs = dict(span.attributes or {})
    assert attrs["router.outcome"] == "dead-lettered"
    assert attrs["router.dead_letter.reason"] == "undecodable-payload"
    assert attrs["router.policy.on_poison"] == "dead-letter"


def test_what_a_unit_shares_is_in_its_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    on = SETTINGS.model_copy(
        update={"tracing": TracingSettings(enabled=True, otlp_endpoint="http://127.0.0.1:1")}
    )
    spans = UnitSpans.of(on, side_spec(on, "receive"), "receive-unit", "host-1")
    assert spans is not None and spans.spans.provider is not None
    resource = spans.spans.provider.resource.attributes
    assert resource["router.side"] == "receive" and resource["router.policy.busy"] == "wait"
    assert resource["service.name"] == "router-receive-unit"
    spans.shutdown()


def test_a_message_drained_out_of_the_room_gets_a_drain_span() -> None:
    memory = MemorySpans()
    spans = UnitSpans(memory.spans, SETTINGS, side_spec(SETTINGS, "send"))
    out = Output()
    routed = Record("router.transfer", 0, None, b"v", [(TRACEPARENT, TP)], 0, None)
    drained = Record("router.transfer", 2, None, b"v", [(TRACEPARENT, TP)], 1_700_000_000_000, None)
    marker = Record("router.room.send", 1, None, None, [(TRACEPARENT, TP)], 0, None)
    out.records = [routed, drained, marker]
    out.drain_from = 1  # the drain's records follow the routed ones
    assert spans.committed(Batch("b", 0, polled_ns=5), out) == 1
    (span,) = memory.finished()
    assert span.name == "drain router.room.send"
    attrs = dict(span.attributes or {})
    assert attrs["router.outcome"] == "drained" and attrs["router.destination"] == "2"
    assert attrs["router.message.age_ms"] > 0


def test_tracing_off_makes_no_unit_spans() -> None:
    assert UnitSpans.of(SETTINGS, side_spec(SETTINGS, "send"), "send-unit", "x") is None
