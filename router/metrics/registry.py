"""Counters of one process, published to Redis once a second and logged periodically.

Names are a typed registry (`MetricName` for counters, `HistogramName` and `GaugeName`
for what only Prometheus shows: `router.metrics.prom`, docs/reference/metrics.md). Hot-loop code
only increments integers in a dict (and observes a few timings per batch, a no-op unless the process
serves Prometheus metrics); publishing happens at most once per interval. `router metrics` and the
demo and benchmark drivers read the published hashes (`<prefix>:metrics:<topology>:<role>:<id>`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Literal

import redis

from router.backends.redis.client import RedisClient
from router.utils.clock import Every

MetricName = Literal[
    "messages_in",  # consumed and handled (forwarded, dead-lettered)
    "messages_out",  # forwarded to a destination
    "grouped",  # messages with a guarantee ID
    "ordinary",
    "finals",
    "dead_letters",
    "parked",  # messages of stopped groups and orphans, on the dead-letter topic
    "close_markers",  # send unit: groups ended without their final, closed downstream
    "closes",  # receive unit: close markers consumed (their groups released)
    "skip_markers",  # send unit: members not forwarded while their group goes on
    "skips",  # receive unit: skip markers consumed (routed as their member)
    "groups_stopped",  # poison messages that stopped their group (policy stop-group)
    "orphans",  # continuations with no table entry (table decisions)
    "orphans_parked",
    "table_resets",  # the table's epoch changed: Redis lost its data
    "batches",
    "redis_round_trips",
    "redis_errors",
    "remembered",  # members decided from the unit's memory of its groups, not sent to Redis
    "memory_stale",  # route calls refused because that memory no longer held (then resent)
    "replica_acks_missing",  # batches not forwarded: too few Redis replicas held their writes
    "kafka_errors",
    "txn_commits",
    "txn_aborts",
    "producer_restarts",  # a producer replaced after a fatal error (or a time-out: unit)
    "busy_shared",  # placed on a destination in charge of an open group
    "busy_held",  # held back (policy hold)
    "hold_timeouts",  # held past hold_timeout_ms, then shared
    "released",  # entries released after their final committed
    "release_failures",  # release deferred to the sweeper
    "rebalances",
    "room_strays",  # admitted groups the room held no record of, found and checked (drain)
    "lanes_fenced",  # table calls refused: another unit claimed the lane since (a zombie's)
    "swept",  # sweeper: entries removed past their TTL
    "abandoned_events",  # sweeper: abandoned-group events published
    "closing_resolved",  # sweeper: interrupted releases completed
    "horizon_unknown",  # sweeper: rounds that swept nothing, the horizon unknown (broker away)
    "sweep_deferred",  # sweeper: rounds that kept entries past their TTL (units behind)
    "route_us",  # total time spent in the routing round trip, microseconds
    "room_parked",  # parked in the waiting room (policy wait)
    "room_drained",  # forwarded out of the waiting room once their group was admitted
    "room_admitted",  # groups (and lanes' ordinary messages) drained out of the room
    "room_chained",  # of them, groups and lanes drained whole behind an admitted group
    # how long they waited: their oldest parked message's age when first drained
    "room_wait_le_100ms",
    "room_wait_le_1s",
    "room_wait_le_10s",
    "room_wait_le_60s",
    "room_wait_gt_60s",
    "staging_aborted",  # staged groups over routing.max_staged_messages, now streamed
    "room_staged_bytes",  # payload bytes parked in the room for whole-group delivery
    "seq_duplicates",  # logical order: members below the next number, dead-lettered
    "sequence_gaps",  # logical order: gaps open past routing.gap_timeout_ms (SequenceGap)
    "wait_timeouts",  # sweeper: groups that waited past routing.max_wait_ms
    "expired",  # not forwarded: their lifetime ended (ExpiredMessage events)
    "multicast",  # receive unit: multicast messages fanned out to their queues
    "multicast_copies",  # ... their copies, written straight or parked in the waiting room
    "band_share_turns",  # priority: batches given to a lower band by its minimum share
    "band_crowded_asks",  # priority: higher bands' ends asked while the local queue was full
    "stranded_reassigned",  # partitions unread for 20 s though records waited, assigned again
    # where a unit's time goes (microseconds, summed; docs/explanation/performance.md): the run
    # loop's poll, deciding (classify, route), building the output, the produce calls, waiting
    # for the previous batch's commit; on the commit thread the offsets call, waiting for every
    # record to be appended (leases), and commit_transaction
    "time_poll_us",
    "time_decide_us",
    "time_emit_us",
    "time_produce_us",
    "time_commit_wait_us",
    "time_offsets_us",
    "time_append_us",
    "time_commit_us",
]

# Timings, as Prometheus histograms (seconds); labels in `router.metrics.prom`.
HistogramName = Literal[
    "batch_route_seconds",  # deciding a batch: classify, the table's round trip, the room
    "hop_latency_seconds",  # a forwarded record's timestamp to its transaction's commit
    "txn_commit_seconds",  # a batch's offsets into its transaction, and the commit
    "redis_rtt_seconds",  # one round trip to the management table (route, settle)
]

# Levels, as Prometheus gauges; refreshed every unit.metrics_interval_ms or on scrape.
GaugeName = Literal[
    "open_groups",  # table entries in charge of each destination (the table's load hash)
    "source_lag",  # records between a source partition's position and its high watermark
    "inflight_batches",  # 0 or 1: a batch's transaction committing (the commit overlap)
    "assigned_partitions",  # source partitions this unit holds
    "room_waiting",  # groups (and lanes' ordinary messages) waiting in each side's room
    "room_oldest_wait_seconds",  # how long the oldest of them has waited (0: none waits)
]

Observer = Callable[[HistogramName, float], None]

log = logging.getLogger("router.metrics")

WAIT_BUCKETS: tuple[tuple[int, MetricName], ...] = (
    (100, "room_wait_le_100ms"),
    (1_000, "room_wait_le_1s"),
    (10_000, "room_wait_le_10s"),
    (60_000, "room_wait_le_60s"),
)


def wait_bucket(ms: int) -> MetricName:
    """The histogram bucket of a wait (non-cumulative counters)."""
    for bound, name in WAIT_BUCKETS:
        if ms <= bound:
            return name
    return "room_wait_gt_60s"


class Metrics:
    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.started = time.monotonic()
        self.sink: Observer | None = None  # set by `router.metrics.prom` when it serves metrics

    def inc(self, name: MetricName, n: int = 1) -> None:
        self.counters[name] += n

    def observe(self, name: HistogramName, seconds: float) -> None:
        """A timing (any thread); dropped unless Prometheus metrics are served."""
        if self.sink is not None:
            self.sink(name, seconds)

    def get(self, name: MetricName) -> int:
        return self.counters[name]

    def snapshot(self) -> dict[str, int]:
        return dict(self.counters)


class MetricsPublisher:
    """Publishes a Metrics object to a Redis hash (expires if the process dies)."""

    def __init__(
        self,
        metrics: Metrics,
        client: RedisClient,
        key: str,
        interval_ms: int,
        log_every: int = 10,
    ) -> None:
        self.metrics = metrics
        self.client = client
        self.key = key
        self.interval = interval_ms / 1000
        self.log_every = log_every
        self._every = Every(self.interval)
        self._published = 0
        self.failures = 0
        self.beat: float | None = None  # time.monotonic() the loop last came by (liveness)
        # Called after each publication with its outcome (Redis reachable): `router.metrics.prom`.
        self.hooks: list[Callable[[bool], None]] = []
        # Levels published beside the counters (`source_lag`: the console plots it), read
        # on the loop's thread at each publication.
        self.levels: dict[str, Callable[[], int]] = {}

    def maybe_publish(self, force: bool = False) -> None:
        """Called once per loop iteration: publishes once per interval."""
        self.beat = now = time.monotonic()
        if not self._every.due(now) and not force:
            return
        snapshot = self.metrics.snapshot()
        snapshot["uptime_ms"] = int((now - self.metrics.started) * 1000)
        for name, level in self.levels.items():
            snapshot[name] = level()
        ok = True
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(self.key, mapping=snapshot)
            pipe.expire(self.key, max(30, int(self.interval * 10)))
            pipe.execute()
        except redis.RedisError as exc:
            ok = False
            self.failures += 1
            log.warning("could not publish metrics to Redis (%s); will retry", exc)
        for hook in self.hooks:
            hook(ok)
        self._published += 1
        if force or self._published % self.log_every == 0:
            log.info(
                "metrics %s",
                " ".join(f"{k}={v}" for k, v in sorted(snapshot.items()) if v),
            )


def metrics_key(prefix: str, topology: str, role: str, instance: str) -> str:
    return f"{prefix}:metrics:{topology}:{role}:{instance}"


def read_all(client: RedisClient, prefix: str, topology: str) -> dict[str, dict[str, int]]:
    """Every live process's published counters: {"<role>:<instance>": {...}}."""
    out: dict[str, dict[str, int]] = {}
    base = f"{prefix}:metrics:{topology}:"
    for key in client.scan_iter(match=f"{base}*", count=500):
        name = key.decode() if isinstance(key, bytes) else key
        raw: dict[bytes, bytes] = client.hgetall(name)  # type: ignore[assignment]
        out[name[len(base) :]] = {
            (k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()
        }
    return out
