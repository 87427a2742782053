"""A transfer unit's run loop (both sides, and the raw relay): poll a batch, let the steps
decide it, produce it in one transaction with its offsets, settle it once committed;
rebalancing, holds, back-off. The commit overlap, the session's generation (a batch polled
before a failure is rewound, never produced) and the leases: docs/explanation/unit-loop.md.
Redis or Kafka away (or too few Redis replicas holding the batch's table writes,
`redis.min_replica_acks`): the batch is rewound, the unit backs off, paused but polling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import Producer

from router.backends.kafka import clients
from router.backends.kafka.brokerwatch import NoBrokerWatch, watched
from router.backends.redis import client as redisclient
from router.backends.redis.client import RedisClient
from router.config.settings import RouterSettings
from router.contract.registered import frame_events_at_start
from router.metrics.registry import Metrics, MetricsPublisher, metrics_key
from router.security import kafka as kafkaauth
from router.security.redis import RedisRefused, check_access
from router.topology import topics
from router.topology.cells import all_cells
from router.topology.side import SideSpec, table_for
from router.unit.bandsource import BandSource
from router.unit.commit.bookkeeping import tracker
from router.unit.commit.insync import ReplicaCheck
from router.unit.commit.leases import leases_of
from router.unit.commit.replicawait import ReplicaAcks
from router.unit.commit.session import TransactionalSession
from router.unit.commit.txnstate import TxnFailed, TxnState
from router.unit.exporting import unit_exporter
from router.unit.membership import GroupView
from router.unit.settling import Settling
from router.unit.source import FatalUnitError, Source
from router.unit.spans import UnitSpans
from router.unit.steps.batch import TP, Batch
from router.unit.steps.drain.step import IDLE_S
from router.unit.steps.emit.records import Output
from router.unit.steps.holds import Backoff, Holds
from router.unit.steps.pipeline import Steps, UnitContext, routing_steps
from router.utils.faults import Faults

__all__ = ["FatalUnitError", "TransferUnit"]

log = logging.getLogger("router.unit")


class TransferUnit(Settling):
    def __init__(
        self,
        settings: RouterSettings,
        spec: SideSpec,
        *,
        kind: str = "unit",
        steps: Callable[[UnitContext], Steps] = routing_steps,
        redis_client: RedisClient | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.settings, self.spec = settings, spec
        self.role = f"{spec.side}-{kind}"  # logs, metrics and pid files name it
        self.instance = clients.instance_id()
        self.metrics = Metrics()
        self.faults = faults or Faults()
        self._stop = threading.Event()
        self.redis = redis_client or redisclient.redis_client(settings.redis)
        r, u = settings.routing, settings.unit
        self.holds = Holds(r.hold_retry_ms / 1000, r.hold_timeout_ms / 1000)
        self.backoff = Backoff(u.backoff_initial_ms, u.backoff_max_ms)
        self.rejected: dict[tuple[str, int, int], str] = {}  # the broker refused these
        ctx = UnitContext(
            settings, spec, self.instance, self.redis, self.metrics, self.holds, self.faults,
            self.rejected,
        )  # fmt: skip
        self.steps = steps(ctx)
        tables = [table_for(settings, spec.side, self.redis, c) for c in all_cells(settings)]
        self.leases = leases_of(tables, self.metrics)  # each cell's (router.unit.steps.cells)
        self.acks = ReplicaAcks(self.redis, settings.redis, self.metrics, tables[0].keys.entries)
        self._track = tracker(self.rejected)
        self.publisher = MetricsPublisher(
            self.metrics,
            self.redis,
            metrics_key(
                settings.redis.key_prefix, settings.topology.name, self.role, self.instance
            ),
            u.metrics_interval_ms,
        )
        # One transactional ID per process, kept when the producer is replaced: the new
        # instance's init_transactions fences the old one.
        config = clients.transactional_producer_config(
            settings.kafka, clients.transactional_id(settings, spec.side), self.instance
        )
        # A producer left with no broker (librdkafka#5301) is retired and replaced.
        watch = NoBrokerWatch(settings.kafka.no_broker_replace_s)
        self.session = TransactionalSession(
            lambda: Producer(watched(config, watch)), self._stop, self.metrics, self.faults, watch
        )
        consumer_config = clients.consumer_config(  # not `config`: the lambda above reads it
            settings.kafka, spec.group_id, self.instance, 2 * u.max_batch_bytes
        )
        self.source = Source(
            BandSource.tuned(settings, consumer_config),
            u.batch_size,
            self.metrics,
            u.max_batch_bytes,
            u.max_batch_size,
            NoBrokerWatch(settings.kafka.no_broker_replace_s),
            settings.topology.cells,
        )
        # A failed transaction's warning names partitions short of in-sync replicas.
        self.replicas = ReplicaCheck(
            lambda **kw: self.session.producer.list_topics(**kw),  # noqa: PLW0108 (replaced)
            [t.name for t in topics.plan(settings)],
            settings.kafka.min_insync_replicas,
        )
        if self.steps.claims is not None:  # claims only what the group coordinator confirms
            self.steps.claims.held = GroupView(
                clients.admin_config(settings.kafka), spec.group_id, self.source.consumer
            ).held
        # Priority bands (router.unit.bandsource): higher bands first, a minimum share each.
        self.bands = BandSource.of(settings, spec.side, self.source, self.metrics)
        self._inflight: tuple[Batch, Output] | None = None
        self._rewound: dict[TP, int] = {}  # partitions rewound since the last failure
        self._rewind_to_committed = False
        self._failed_in_a_row = 0  # transactions failed since the last commit
        self._batches = 0
        self.exporter = unit_exporter(self)  # Prometheus metrics, /healthz, /readyz
        # A span per traced message of each committed batch (router.unit.spans); None: off.
        self.tracing = (
            UnitSpans.of(settings, spec, self.role, self.instance) if kind == "unit" else None
        )

    # ------------------------------------------------------------------ lifecycle

    def request_stop(self) -> None:
        """Finish the current batch, commit, leave the group, exit (SIGTERM does this)."""
        self._stop.set()

    def run(self) -> int:
        log.info(
            "%s %s starting: %s -> %d destinations, group %s%s",
            self.role,
            self.instance,
            ",".join(self.spec.sources),
            len(self.spec.destinations),
            self.spec.group_id,
            f", FAULT INJECTION {self.faults.probability}" if self.faults else "",
        )
        try:  # refused credentials or ACLs: retrying cannot help
            check_access(self.redis, self.settings)
            kafkaauth.check_access(self.settings, self.role)
        except (RedisRefused, kafkaauth.KafkaRefused) as exc:
            raise FatalUnitError(str(exc)) from exc
        if not frame_events_at_start(self.settings.registry, self._stop, self.role):
            return 0
        while not self.session.start():
            if self._stop.is_set():
                return 0
        room = self.steps.room
        topics = list(self.spec.sources)
        if room is not None:
            room.consumer = self.source.consumer
            topics.append(room.topic)
        self.source.subscribe(topics, self._on_assign, self._on_revoke)
        self.exporter.start()
        try:
            while not self._stop.is_set():
                self.step()
        finally:
            log.info("%s %s stopping", self.role, self.instance)
            if self._inflight is not None:
                self._complete()
            self.session.abort()
            self.publisher.maybe_publish(force=True)
            self.exporter.stop()
            self.source.close()
            if self.bands is not None:
                self.bands.ends.close()
            if self.tracing is not None:
                self.tracing.shutdown()  # exports what is left
            self.session.close()
        return 0

    def step(self) -> None:
        """One iteration of the loop: wait out a back-off, or handle one batch."""
        if self.backoff.until is not None:
            self._back_off()
        else:
            self._next_batch()
        self._unstrand()
        self.session.poll()
        if self.session.state is TxnState.BROKEN and self.backoff.until is None:
            self._fail(f"transactional producer failed: {self.session.failure}", None)
        self.publisher.maybe_publish()

    # ------------------------------------------------------------------ batches

    def _next_batch(self) -> None:
        inflight = self._inflight
        if inflight is not None and (
            inflight[0].held_at or not self.settings.unit.overlaps(len(inflight[0].items))
        ):
            self._complete()  # held partitions are rewound before polling on; no backlog
        self.source.resume(self.holds.due(time.monotonic()))
        turn = None
        if self.bands is not None:
            turn = self.bands.before_poll(self.source.assigned, self.holds.waiting())
        # A rebalance callback inside the poll may complete the batch in flight; if that
        # fails, what this poll returns is stale: the session's generation moved on.
        generation = self.session.generation
        room = self.steps.room
        eager = self._inflight is not None or (room is not None and room.eager)
        wait_s = self.settings.unit.poll_timeout_ms / 1000
        if room is not None and room.busy():
            wait_s = min(wait_s, IDLE_S)
        if turn is not None and turn.share:
            eager = False  # a lower band's turn: wait for its partitions' fetch
        t0 = time.perf_counter_ns()
        messages = self.source.poll(0.0 if eager else wait_s)
        metrics = self.metrics
        metrics.inc("time_poll_us", (time.perf_counter_ns() - t0) // 1000)
        batch = None
        if messages or (room is not None and room.due() and self.backoff.until is None):
            self._batches += 1
            batch = Batch(f"{self.instance}:{self._batches}", generation)
            if self.tracing is not None:
                batch.polled_ns = time.time_ns()
            if self._inflight is not None:  # it commits before this one is produced
                before, before_out = self._inflight
                batch.earlier, batch.carried = [before.id], list(before_out.finals)
            if generation == self.session.generation:
                self.acks.begin()
                t0 = time.perf_counter_ns()
                self.steps.decide(batch, messages)
                metrics.inc("time_decide_us", (time.perf_counter_ns() - t0) // 1000)
            else:
                for m in messages:
                    batch.track(m)
        if self._inflight is not None and not self._complete():
            if batch is not None:
                self._discard(batch)
            return
        if batch is None:
            return
        if batch.failure is not None:
            self._fail(batch.failure, batch)
            return
        if batch.first and not batch.resume_offsets():  # all held at the head of its partition
            self._apply_holds(batch)
            return
        session = self.session
        try:
            if not session.begin(batch.generation):
                self._discard(batch)  # polled while the previous transaction failed
                return
            self._rewound.clear()
            t0 = time.perf_counter_ns()
            out = self.steps.emit(batch, int(time.time() * 1000))
            t1 = time.perf_counter_ns()
            if self.faults.hit("before_produce"):  # a batch outliving its leases (tests)
                self.faults.freeze("before_produce")
            self._keep_leases(batch, out)
            session.produce(out.records, self._track, out.barriers)
            metrics.inc("time_emit_us", (t1 - t0) // 1000)
            metrics.inc("time_produce_us", (time.perf_counter_ns() - t1) // 1000)
            append_by = self._keep_leases(batch, out)
            # with the room's low marks (router.unit.steps.drain.step)
            offsets = batch.resume_offsets()
            self.acks.confirm(session.fail)  # redis.min_replica_acks replicas hold its writes
            session.commit(
                offsets,
                self.source.group_metadata(),
                append_by,
                lambda: self._after_commit(batch, out),
            )
        except TxnFailed as exc:
            self._fail(str(exc), batch)
            return
        self._inflight = (batch, out)
