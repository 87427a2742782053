"""The Receiver's spans (`router.tracing`): a `receive` span when a traced message is handed
to the application, and a `process` span around its handling (`Receiver.traced`, which
`Receiver.process` uses), made current so that the application's own spans are its
children. Both continue the trace of the message's `traceparent`, which the Sender (or any
producer) set and the units carried unchanged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from router.receiver.received import Received
from router.tracing.context import parent_of, traced

if TYPE_CHECKING:
    from router.tracing.spans import Spans


def _attributes(m: Received, operation: str, group_id: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.operation.type": operation,
        "messaging.destination.name": m.topic,
        "messaging.destination.partition.id": str(m.partition),
        "messaging.kafka.offset": m.offset,
        "messaging.consumer.group.name": group_id,
    }
    if m.guarantee_id is not None:
        attrs["router.guarantee_id"] = m.guarantee_id
        attrs["router.final"] = m.final
        if m.seq is not None:
            attrs["router.seq"] = m.seq
    if m.timestamp_ms:
        attrs["router.message.age_ms"] = max(int(time.time() * 1000) - m.timestamp_ms, 0)
    return attrs


class ReceiveSpans:
    def __init__(self, spans: Spans, group_id: str) -> None:
        self.spans, self.group_id = spans, group_id

    def handed(self, m: Received) -> Received:
        """A `receive` span for a traced message handed to the application."""
        parent = traced(m.headers)
        if parent is not None:
            now = time.time_ns()
            attrs = _attributes(m, "receive", self.group_id)
            self.spans.finished(f"receive {m.topic}", parent, now, now, attrs)
        return m

    @contextmanager
    def processing(self, m: Received) -> Iterator[Any]:
        """A current `process` span while the application handles `m`."""
        attrs = _attributes(m, "process", self.group_id)
        with self.spans.current(f"process {m.topic}", parent_of(m.headers), attrs) as span:
            yield span
