"""How a `Sender` (router.sender.client) sends, and where each message goes: a group's
members on its first member's lane, numbered and journaled; a large payload in segments,
a window of them unacknowledged; the open groups it can list or abandon; the flush. A
base class of `Sender`; it holds no state of its own."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

from router.contract import priority as prio
from router.contract import request as sendrequest
from router.contract import segments
from router.sender import groups as sendgroups
from router.sender.backlog import Backlog
from router.sender.delivery import TP, Deliveries, OnDelivery, Track
from router.sender.groups import DeliveryFailed, SendReceipt
from router.sender.journal import Journal, OpenGroupInfo, info
from router.sender.traced import SendSpans
from router.utils.clock import Every

Payload = bytes | bytearray | memoryview | None


class Sending:
    """The sending side of `Sender`; the attributes are set by `Sender.__init__`."""

    _backlog: Backlog
    _bands: int
    _default_order: Literal["lane", "logical"]
    _groups: sendgroups.OpenGroups
    _journal: Journal | None
    _lock: threading.Lock
    _out: Deliveries
    _segment_bytes: int
    _window_bytes: int
    _sync: Every
    _tracing: SendSpans | None

    # ------------------------------------------------------------------ sending

    def send(
        self,
        value: Payload,
        *,
        guarantee_id: str | None = None,
        final: bool = False,
        key: bytes | None = None,
        message_type: str | None = None,
        ttl_ms: int | None = None,
        headers: Sequence[tuple[str, str | bytes | None]] = (),
        on_delivery: OnDelivery | None = None,
        delivery: Literal["stream", "complete"] | None = None,
        priority: int | None = None,
    ) -> SendReceipt:
        """Send one message; a group's messages go to one partition, numbered, in the
        order sent. Asynchronous, like `Producer.produce`: `flush()` (or leaving the
        `with` block) waits for Kafka's acknowledgements; `on_delivery(err, msg)` is
        called with each.

        `guarantee_id` makes it a member of that group, `final` its last message.
        `delivery="complete"` on a group's first message asks for whole-group delivery
        (docs/explanation/routing.md); None leaves it to the router's configuration. `headers` may
        carry routing headers too (`guarantee-id`, `guarantee-seq`, ...: see
        `router.sender.groups`); they are checked, and InvalidRequest says what is wrong
        with one (a `guarantee-seq` that is not the group's next number, a header given
        twice) before anything is sent.

        A `value` (bytes, bytearray or memoryview) larger than `segment_bytes` is sent as
        segments, one group member each (an ordinary message: a group of its own), with
        at most `segment_window` unacknowledged; a receiver of this library gets it back
        whole. `on_delivery` is called for each segment, and the receipt says how many
        numbers of the group it took.

        `priority` (0..9, or a `message-priority` header in `headers`; default 0): on a
        topology with priority bands, the message goes to its band's send queue
        `<queue>.p<band>` and overtakes lower bands' backlog (docs/explanation/priority.md). A group
        keeps its first message's band: later members' priorities are ignored."""
        span = None
        if self._tracing is not None:  # a producer span; its context goes in `headers`
            span, headers = self._tracing.start(headers)
        try:
            r = sendrequest.request(
                headers,
                guarantee_id=guarantee_id,
                final=final,
                message_type=message_type,
                ttl_ms=ttl_ms,
                delivery=delivery,
                default_order=self._default_order,
            )
            if isinstance(value, str):  # as confluent-kafka takes it
                value = value.encode("utf-8")
            elif value is not None and not isinstance(value, bytes):
                value = memoryview(value).cast("B")
            band, ranked = prio.sender_band(priority, headers, self._bands)
            if value is not None and len(value) > self._segment_bytes:
                view = memoryview(value).cast("B")
                receipt = self._send_segments(view, r, key, on_delivery, band, ranked)
                if span is not None:  # ends once every segment is produced
                    self._traced(span, receipt, r, len(view), None, segmented=True)
                return receipt
            if isinstance(value, memoryview):
                value = value.tobytes()  # produce() takes bytes
            tp, seq, track = self._place(r, band)
        except BaseException as exc:
            if span is not None:
                assert self._tracing is not None
                self._tracing.failed(span, exc)
            raise
        if span is not None:  # ends when Kafka acknowledges it
            receipt = SendReceipt(tp[0], tp[1], seq)
            on_delivery = self._traced(span, receipt, r, len(value or b""), on_delivery)
        routing = sendrequest.routing_headers(r, seq)
        self._out.produce(tp, key, value, [*routing, *r.others, *ranked], on_delivery, track)
        self._backlog.sent(tp)
        self._sync_journal()
        return SendReceipt(tp[0], tp[1], seq)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every message to be acknowledged; raise DeliveryFailed if any was not."""
        failures = self._out.flush(timeout)
        if failures:
            raise DeliveryFailed(failures)

    def _traced(
        self,
        span: Any,
        at: SendReceipt,
        r: sendrequest.Request,
        size: int,
        on: OnDelivery | None,
        segmented: bool = False,
    ) -> OnDelivery | None:
        """Name the span after where the message went; end it now (`segmented`: every
        segment produced), or return the delivery callback that ends it."""
        assert self._tracing is not None
        SendSpans.placed(span, at.topic, at.partition, r.guarantee_id, at.seq, r.final, size)
        if segmented:
            self._tracing.spans.end(span)
            return None
        return self._tracing.acknowledged(span, on)

    def _place(
        self, r: sendrequest.Request, band: int = 0, record: bool = True
    ) -> tuple[TP, int | None, Track | None]:
        """The partition (of `band`'s send queue), number and journal track of message
        `r` (`record`: journal it). A group's later members follow its first one's lane."""
        if r.guarantee_id is None:
            return prio.lane(self._backlog.least(), band), None, None
        new = r.guarantee_id not in self._groups
        new_lane = self._backlog.new_group
        tp, seq = self._groups.place(r, time.monotonic(), lambda: prio.lane(new_lane(), band))
        if self._journal is None or not record:
            return tp, seq, None
        end = self._backlog.end_bound(tp)
        try:
            return tp, seq, self._journal.record(r, tp, seq, new, end, self._lock, self.flush)
        except BaseException:
            if new:
                self._groups.drop(r.guarantee_id)
            raise

    def _send_segments(
        self,
        view: memoryview,
        r: sendrequest.Request,
        key: bytes | None,
        on: OnDelivery | None,
        band: int = 0,
        ranked: Sequence[tuple[str, bytes]] = (),
    ) -> SendReceipt:
        """`view` in segments (`router.contract.segments.plan`), at most a window unacknowledged."""
        digest = hashlib.sha256(view).hexdigest()
        plan = segments.plan(r, view.nbytes, digest, self._segment_bytes)
        receipt: SendReceipt | None = None
        try:
            for part in plan.parts:
                tp, seq, track = self._place(part.request, band, record=not plan.own)
                headers = [*sendrequest.routing_headers(part.request, seq), *part.headers]
                headers += ranked
                value = view[part.start : part.end].tobytes()  # one segment at a time
                self._out.produce(tp, key, value, headers, on, track)
                self._backlog.sent(tp)
                if receipt is None:
                    seq = None if plan.own else seq
                    receipt = SendReceipt(tp[0], tp[1], seq, plan.count, plan.set_id)
                self._out.wait_below(self._window_bytes)
        except BaseException:
            if plan.own:  # the receiver reports the partial message; forget its group
                self._groups.drop(plan.set_id)
            raise
        self._sync_journal()
        assert receipt is not None
        return receipt

    def _sync_journal(self) -> None:
        if self._journal is not None and self._sync.due():
            with self._lock:
                self._journal.sync()

    def open_groups(self) -> dict[str, OpenGroupInfo]:
        """Each group this sender has open (no final sent yet): its lane, next number and
        age (for a sender with an ID, since it was first opened, across restarts).
        Finish one by sending on (`final=True` last), or `abandon` it."""
        with self._lock:
            return info(self._groups.groups(), self._journal)

    def abandon(self, guarantee_id: str) -> bool:
        """Forget an open group and send nothing more for it (whether it was open). The
        router's entry stays until its TTL, then the sweeper publishes `AbandonedGroup`;
        receivers got the members sent so far, without a final. Reuse the ID only after
        that: a new message under it before is taken for the old group's continuation."""
        with self._lock:
            if self._journal is not None:
                self._journal.abandon(guarantee_id)
        return self._groups.drop(guarantee_id)
