"""The steps of a unit's batch, composed: classify -> route -> emit, then settle after
the batch's transaction committed. The run loop (`router.unit.loop`) only sees `Steps`; the
raw relay is the same loop with pass-through steps (`router.unit.relay`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

import redis
from confluent_kafka import Message

from router.backends.kafka import clients
from router.backends.kafka.endoffsets import EndOffsets
from router.backends.redis.client import RedisClient, redis_client
from router.config.settings import RouterSettings
from router.metrics.registry import Metrics
from router.table.routing import STOPPED
from router.table.store.management import ManagementTable
from router.topology import cells
from router.topology.side import SideSpec, side_spec, table_for
from router.unit.steps.bands import BandStep, GroupBands
from router.unit.steps.batch import TP, Batch
from router.unit.steps.cells import CellRouting
from router.unit.steps.classify import Classifier
from router.unit.steps.drain.step import Drain
from router.unit.steps.emit.emitter import Emitter
from router.unit.steps.emit.records import Output
from router.unit.steps.holds import Holds
from router.unit.steps.ownership import Held, LaneClaims
from router.unit.steps.route import TableRoute
from router.utils.faults import Faults

log = logging.getLogger("router.steps")


class Room(Protocol):
    """The waiting room as the run loop sees it: a drain step (`Drain`), or each cell's
    (`router.unit.steps.cells.CellRoom`)."""

    topic: str
    consumer: object

    @property
    def eager(self) -> bool: ...
    def busy(self) -> bool: ...
    def due(self) -> bool: ...
    def reset(self) -> None: ...
    def assign(self, tps: list[TP]) -> None: ...
    def revoke(self, tps: list[TP]) -> None: ...


class Claims(Protocol):
    held: Held | None  # the group coordinator's view, set by the unit


class Steps(Protocol):
    @property
    def room(self) -> Room | None:
        """The drain step, if the unit has a waiting room."""

    @property
    def claims(self) -> Claims | None:
        """Its claims on its partitions in the table, if it has one."""

    def decide(self, batch: Batch, messages: list[Message]) -> None:
        """Fill the batch: items and their decisions, or `batch.failure`."""

    def emit(self, batch: Batch, now_ms: int) -> Output:
        """The records the batch's transaction produces."""

    def release(self, batch: Batch, out: Output) -> None:
        """The table's part of settling, as soon as the batch's transaction committed
        (on the session's call thread): it must not raise; `settle` reports it."""

    def settle(self, batch: Batch, out: Output) -> None:
        """After the batch's transaction committed (the run loop's part)."""

    def assigned(self, tps: list[TP]) -> None:
        """Partitions assigned to the unit (claimed in the table: `router.unit.steps.ownership`)."""

    def revoked(self, tps: list[TP]) -> None:
        """Partitions taken from the unit."""


class RoutingSteps:
    """A transfer unit's steps: the patent's routing through a management table."""

    def __init__(
        self,
        classifier: Classifier,
        route: TableRoute,
        emitter: Emitter,
        table: ManagementTable,
        metrics: Metrics,
        room: Drain | None = None,
        bands: BandStep | None = None,
        release_table: ManagementTable | None = None,
        claims: LaneClaims | None = None,
    ) -> None:
        self.room = room
        self.claims = claims
        # The release runs on the session's call thread: on a client (connection pool) of
        # its own, so that the run loop's replica WAIT (`router.unit.commit.replicawait`) runs on
        # the connection of the loop's own writes, never on one the release wrote on last.
        self.release_table = release_table or table
        self.bands = bands  # priority bands (router.unit.steps.bands), if the topology has them
        self.classifier = classifier
        self.route = route
        self.emitter = emitter
        self.table = table
        self.metrics = metrics

    def decide(self, batch: Batch, messages: list[Message]) -> None:
        t0 = time.perf_counter()
        if self.room is not None:
            messages = self.room.take(messages)  # room records are drained, not routed
        self.classifier.classify(batch, messages)
        if batch.failure is None and self.bands is not None and self.bands.table is not None:
            self.bands.assign(batch)
        if batch.items and batch.failure is None:
            self.route.route(batch)
        self.metrics.observe("batch_route_seconds", time.perf_counter() - t0)

    def emit(self, batch: Batch, now_ms: int) -> Output:
        out = self.emitter.emit(batch, now_ms)
        if self.room is not None and batch.failure is None:
            out.drain_from = len(out.records)
            try:
                self.room.emit(batch, out, now_ms)
            except redis.RedisError as exc:
                self.metrics.inc("redis_errors")
                log.warning("the waiting room cannot be drained now: %s", exc)
        if self.bands is not None:
            self.bands.retarget(out)
        return out

    def release(self, batch: Batch, out: Output) -> None:
        """End the batch's in-flight leases, release the groups whose final it committed
        and open the drained ones (one round trip), right after the commit: on the
        session's call thread, so that other batches' decisions (this unit's next one,
        decided meanwhile, and other units') see the destinations free at once, not after
        the run loop's next decision. Never raises: `settle` counts and logs the outcome
        (`batch.extra["release"]`). If Redis is away, the leases expire by themselves and
        the sweeper releases the finals once it sees the committed offsets: nothing can
        split meanwhile, a destination is only freed late."""
        if not (
            out.finals or out.ordinary_dests or out.stopped or out.drains or out.parked_in_room
        ):
            return
        releases = [*out.finals, *((gid, STOPPED) for gid in out.stopped)]
        try:
            t0 = time.perf_counter()
            table = self.release_table
            released = table.settle(
                batch.id, out.ordinary_dests, releases, out.drains, out.drain_claims
            )
            fenced = table.last_fenced if out.drains else None
            batch.extra["release"] = (released, time.perf_counter() - t0, fenced)
        except Exception as exc:  # reported by `settle`, on the run loop
            batch.extra["release"] = exc

    def assigned(self, tps: list[TP]) -> None:
        if self.claims is not None:
            self.claims.assigned(tps)

    def revoked(self, tps: list[TP]) -> None:
        if self.claims is not None:
            self.claims.revoked(tps)

    def settle(self, batch: Batch, out: Output) -> None:
        """The run loop's part, after the commit: the drain's and the bands' own state,
        and the outcome of `release` (run here if the commit did not run it)."""
        if self.room is not None:
            self.room.settle(batch)
        if self.bands is not None:
            self.bands.settle(batch, out)
        if "release" not in batch.extra:
            self.release(batch, out)
        outcome = batch.extra.pop("release", None)
        m = self.metrics
        if isinstance(outcome, tuple):
            released, seconds, fenced = outcome
            m.inc("released", released)
            m.observe("redis_rtt_seconds", seconds)
            m.inc("redis_round_trips")
            if fenced is not None:  # its drains ignored: another unit claimed the room lane
                m.inc("lanes_fenced")
                if self.claims is not None:
                    self.claims.fenced(fenced)  # rechecked with the coordinator, reclaimed
        elif isinstance(outcome, redis.RedisError):
            m.inc("redis_errors")
            m.inc("release_failures", len(out.finals))
            log.warning(
                "settling batch %s failed (%d finished groups left to the sweeper): %s",
                batch.id,
                len(out.finals),
                outcome,
            )
        elif outcome is not None:
            raise outcome  # a defect, not an outage: as loud as it was on the run loop


@dataclass(frozen=True)
class UnitContext:
    """What a unit shares with its steps."""

    settings: RouterSettings
    spec: SideSpec
    instance: str
    redis: RedisClient
    metrics: Metrics
    holds: Holds
    faults: Faults
    rejected: dict[tuple[str, int, int], str]  # source position -> the broker's refusal


def routing_steps(ctx: UnitContext) -> RoutingSteps | CellRouting:
    """The steps of a transfer unit of `ctx.spec.side`: with several cells, each cell's
    (`router.unit.steps.cells`)."""
    n = ctx.settings.topology.cells
    if n == 1:
        return cell_steps(ctx, 0)
    cells.units_can_route(ctx.settings)
    return CellRouting([cell_steps(ctx, c) for c in range(n)])


def cell_steps(ctx: UnitContext, cell: int) -> RoutingSteps:
    """The steps of a transfer unit of `ctx.spec.side` for one cell's share of its batches:
    the cell's table, destinations and room partitions (with one cell: all of them)."""
    s = ctx.settings
    one = s.topology.cells == 1
    spec = ctx.spec if one else side_spec(s, ctx.spec.side, cell)
    table = table_for(s, ctx.spec.side, ctx.redis, cell)
    claims = LaneClaims(table)  # its coordinator view is set by the unit (router.unit.loop)
    parts: int | list[int] = s.routing.room_partitions
    if not one:
        parts = cells.room_partitions(s, cell)
    emitter = Emitter(s, spec, ctx.instance, None if isinstance(parts, int) else parts)
    room = Drain(
        table,
        spec,
        s.topology.room_topic(ctx.spec.side),
        parts,
        emitter,
        ctx.metrics,
        s.routing.gap_timeout_ms,
        s.routing.gap_policy,
        # The high watermarks, not the last stable offsets: a park committed just before
        # (its lease ended by the settle) may still lie past the LSO until its commit
        # marker lands; the drain must read past it before opening the group. The room
        # partitions' starts are asked on the same connection of its own.
        EndOffsets(clients.admin_config(s.kafka), committed=False),
    )
    room.claims = claims
    bands = None
    if s.priority.bands > 1:
        send = ctx.spec.side == "send"
        t = s.topology
        bands = BandStep(
            s.priority.bands,
            t.send_queues if send else (),
            [t.transfer_topic] if send else t.receive_queues,
            GroupBands(ctx.redis, table.keys, s.routing.max_ttl_ms, ctx.metrics) if send else None,
        )
    return RoutingSteps(
        Classifier(s, ctx.spec.side, ctx.rejected),
        TableRoute(
            table,
            s.routing,
            ctx.metrics,
            ctx.holds,
            ctx.faults,
            sequenced=ctx.spec.side == "send",
            fanout=ctx.spec.side == "receive",
            claims=claims,
            cell_queues=None if one else spec.destinations,
        ),
        emitter,
        table,
        ctx.metrics,
        room,
        bands,
        table_for(s, ctx.spec.side, redis_client(s.redis), cell),
        claims,
    )
