"""The workload's senders (`ops.harness.traffic.workload` plans what each sends): one
thread per sender, each with its own `router.sender.Sender` (or, with `WorkloadSpec.plain`,
a plain idempotent producer with the README's headers), paced to the workload's rate.
`Senders.sent` is every message Kafka acknowledged (`Sent`): what the verdict expects."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace
from typing import Any

from confluent_kafka import Producer

from ops.harness.traffic.workload import Headers, WorkloadSpec, encode_event, plan
from ops.harness.verdict.records import Sent
from router.backends.kafka.clients import idempotent_producer_config
from router.config import RouterSettings
from router.contract import headers_for
from router.sender import DeliveryFailed, Sender

log = logging.getLogger("router.workload")


class Senders:
    """Runs the workload's senders as threads; `sent` is what Kafka acknowledged."""

    def __init__(self, settings: RouterSettings, spec: WorkloadSpec) -> None:
        self.settings = settings
        self.spec = spec
        self.sent: list[Sent] = []
        self.failures: list[str] = []
        self.attempted = 0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"sender-{i}", daemon=True)
            for i in range(spec.senders)
        ]
        self.started = 0.0
        self.finished = 0.0
        self._stop = threading.Event()
        self.limit: int | None = None  # see `hold_at`
        # Every sender starts its plan once all have their producer ready: what a run
        # measures from the first create time is the router, not a producer's start
        self._ready = threading.Barrier(spec.senders)

    def hold_at(self, limit: int | None) -> None:
        """Senders wait once `limit` messages in all were attempted, until the limit is
        raised or lifted (None): a driver keeps traffic in reserve for a later phase."""
        self.limit = limit

    def _held(self) -> bool:
        limit = self.limit
        return limit is not None and self.attempted >= limit and not self._stop.is_set()

    def start(self) -> None:
        self.started = time.monotonic()
        for t in self._threads:
            t.start()

    def join(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(deadline - time.monotonic(), 0))
        done = not any(t.is_alive() for t in self._threads)
        if done and not self.finished:
            self.finished = time.monotonic()
        return done

    def stop(self, timeout: float = 90.0) -> bool:
        """Stop sending before the plan is done (what was sent is still flushed)."""
        self._stop.set()
        return self.join(timeout)

    def _run(self, index: int) -> None:
        sender: Sender | PlainSender
        if self.spec.plain:
            sender = PlainSender(self.settings, f"{self.spec.run_id}-s{index}", index)
        else:
            stats = ProducerState()
            sender = Sender.from_settings(
                self.settings,
                client_id=f"{self.spec.run_id}-s{index}",
                producer_overrides=stats.config(),
            )
        if isinstance(sender, PlainSender):
            sender.warm_up()
        try:
            self._ready.wait(timeout=30)
        except threading.BrokenBarrierError:
            log.warning("sender %d: not every sender got ready in 30 s; starting anyway", index)
        scattered: Scattered | None = None
        interval = 1 / self.spec.rate if self.spec.rate else 0.0
        next_at = time.monotonic()
        try:
            for planned, ctx in plan(self.spec, index):
                if self._held():
                    while self._held():
                        self._stop.wait(0.05)
                    next_at = time.monotonic()  # paced from here, no burst
                if self._stop.is_set():
                    break
                expected = replace(planned, created_ms=int(time.time() * 1000))

                def delivered(err: Any, _msg: Any, expected: Sent = expected) -> None:
                    if err is None:
                        with self._lock:
                            self.sent.append(expected)

                payload = encode_event(
                    expected.event_id,
                    ctx["sender"],
                    expected.group,
                    expected.seq,
                    expected.final,
                    ctx["rng"],
                    self.spec.payload_bytes,
                    expected.created_ms,
                )
                key = (expected.group or expected.event_id).encode()
                if "scatter" in ctx:  # logical order: a member to a random partition
                    if scattered is None:
                        scattered = Scattered(
                            self.settings, f"{self.spec.run_id}-s{index}-l", index
                        )
                    scattered.scatter(payload, ctx["scatter"], ctx["headers"], delivered)
                elif isinstance(sender, PlainSender):
                    sender.send(
                        payload,
                        expected.group,
                        expected.final,
                        key,
                        delivered,
                        expected.seq,
                        ctx["headers"],
                    )
                else:
                    sender.send(
                        payload,
                        guarantee_id=expected.group,
                        final=expected.final,
                        key=key,
                        on_delivery=delivered,
                        headers=ctx["headers"],
                        delivery=ctx.get("delivery"),
                    )
                with self._lock:
                    self.attempted += 1
                if interval:
                    next_at += interval
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)  # pacing the offered load
            sender.close(60)
            if scattered is not None:
                scattered.close(60)
        except DeliveryFailed as exc:
            with self._lock:
                self.failures.extend(exc.failures)
                if not isinstance(sender, PlainSender):
                    self.failures.append(f"sender {index}'s producer at the end: {stats.last}")
            log.error("sender %d: %s", index, exc)
        except Exception as exc:  # a dead sender thread must be visible in the summary
            with self._lock:
                self.failures.append(f"sender {index} crashed: {exc!r}")
            log.exception("sender %d crashed", index)


class ProducerState:
    """The last of librdkafka's statistics that says why a producer may be stuck: its
    idempotence state and age, messages queued, and each broker's state with requests in
    flight (kept for a failure report; a stall past a broker restart is otherwise silent)."""

    def __init__(self, interval_ms: int = 5_000) -> None:
        self.interval_ms = interval_ms
        self.last = "no statistics yet"

    def config(self) -> dict[str, Any]:
        return {"statistics.interval.ms": self.interval_ms, "stats_cb": self._stats}

    def _stats(self, raw: str) -> None:
        try:
            s = json.loads(raw)
            eos = s.get("eos", {})
            brokers = ", ".join(
                f"{b.get('nodename')} {b.get('state')} "
                f"(in flight {b.get('waitresp_cnt')}, to send {b.get('outbuf_cnt')})"
                for b in s.get("brokers", {}).values()
            )
            self.last = (
                f"idempotence {eos.get('idemp_state')} for {eos.get('idemp_stateage')} ms, "
                f"PID {eos.get('producer_id')}/{eos.get('producer_epoch')}, "
                f"{s.get('msg_cnt')} messages queued; brokers: {brokers}"
            )
        except (ValueError, AttributeError) as exc:
            self.last = f"unreadable statistics: {exc}"


class PlainSender:
    """What a user without the router's client does: an idempotent producer, the
    README's headers, the guarantee ID as the key (so a group stays on one partition)."""

    def __init__(self, settings: RouterSettings, client_id: str, index: int) -> None:
        queues = settings.topology.send_queues
        self.topic = queues[index % len(queues)]
        self.idempotence = ""  # librdkafka's statistics: eos.idemp_state
        config = idempotent_producer_config(settings.kafka, client_id)
        config.update({"statistics.interval.ms": 100, "stats_cb": self._stats})
        self.producer = Producer(config)
        self.failures: list[str] = []

    def _stats(self, raw: str) -> None:
        self.idempotence = json.loads(raw).get("eos", {}).get("idemp_state", "")

    def warm_up(self, timeout: float = 10.0) -> None:
        """Until the send queue's metadata and the producer ID are in: without, the first
        message waits about 0.5 s for them after its create time, which a burst would
        count as the router's."""
        deadline = time.monotonic() + timeout
        try:
            self.producer.list_topics(self.topic, timeout=timeout)
        except Exception as exc:  # the first send then pays for it; nothing is lost
            log.warning("sender for %s: no metadata in %.0f s: %s", self.topic, timeout, exc)
        while self.idempotence != "Assigned" and time.monotonic() < deadline:
            self.producer.poll(0.05)

    def send(
        self,
        payload: bytes,
        guarantee_id: str | None,
        final: bool,
        key: bytes,
        on_delivery: Any,
        seq: int = 0,
        extra: Headers | None = None,
    ) -> None:
        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.failures.append(f"{key!r}: {err}")
            on_delivery(err, msg)

        headers = headers_for(guarantee_id, seq=seq if guarantee_id else None, final=final)
        headers = [*headers, *(extra or [])]
        while True:
            try:
                self.producer.produce(
                    self.topic, payload, key, headers=headers, on_delivery=delivered
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)
        self.producer.poll(0)

    def close(self, timeout: float) -> None:
        left = self.producer.flush(timeout)
        if left or self.failures:
            raise DeliveryFailed([*self.failures, *[f"{left} not delivered"] * bool(left)])


class Scattered(PlainSender):
    """The logical-order groups' producer: each member to the partition its plan drew
    (`scatter` modulo the send queue's partitions), headers as planned."""

    def __init__(self, settings: RouterSettings, client_id: str, index: int) -> None:
        super().__init__(settings, client_id, index)
        self.partitions = settings.topology.send_queue_partitions

    def scatter(self, payload: bytes, scatter: int, headers: Headers, on_delivery: Any) -> None:
        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.failures.append(f"logical member: {err}")
            on_delivery(err, msg)

        while True:
            try:
                self.producer.produce(
                    self.topic,
                    payload,
                    partition=scatter % self.partitions,
                    headers=headers,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)
