"""What the benchmark measures and what it found: workloads, the plan's sizes, and the
results (throughput, latency, the headline's side-by-side rounds, Redis's own cost).
Pure data and arithmetic: no servers."""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only named: the scripts' driver (scriptcost.py) imports this module
    # under an older revision's `router/` too (`--baseline`), which may have no cells
    from ops.harness.benchmark.cellcost import ClusterRun

SIZES = (100, 1_000, 10_000)
GROUPED = (0.0, 0.5, 1.0)
OPEN_GROUPS = (10, 10_000)
SOURCE_PARTITIONS = 4
TRANSFER_PARTITIONS = 12
RECEIVE_QUEUES = 16
MEAN_GROUP_LENGTH = 20

# The stages, by name, and the baseline each is compared with.
PY_RELAY = "raw relay (send side)"
JAVA_RELAY = "Java relay (send side)"
SEND = "send unit"
RECEIVE = "receive unit"
PATH = "whole path"
PY_CHAINED = "raw relays chained"
JAVA_CHAINED = "Java relays chained"
HA_SUFFIX = ", 3 brokers"  # the same stage on the replicated cluster (acks=all, min ISR 2)
# The same unit stage with tracing off and on (tracing.enabled, spans to a Jaeger of the
# run's own), side by side on a workload whose every message carries a sampled traceparent.
TRACING_OFF, TRACING_ON = ", tracing off", ", tracing on"
BASELINES = {
    SEND: PY_RELAY,
    RECEIVE: "raw relay (receive side)",
    PATH: PY_CHAINED,
    SEND + HA_SUFFIX: PY_RELAY + HA_SUFFIX,
}
JAVA_BASELINES = {SEND: JAVA_RELAY, PATH: JAVA_CHAINED}


@dataclass(frozen=True)
class Workload:
    size: int  # payload bytes
    grouped: float  # share of messages that belong to a group
    open_groups: int  # groups open at once
    # The share of messages whose W3C traceparent is sampled (a trace of their own each); with
    # any, the others carry an unsampled one, as a Sender at that tracing.sample_ratio sends.
    traced: float = 0.0

    @property
    def label(self) -> str:
        size = f"{self.size // 1000} KB" if self.size >= 1000 else f"{self.size} B"
        traced = ""
        if self.traced:
            traced = ", all traced" if self.traced >= 1 else f", {self.traced:.0%} traced"
        return f"{size}, {self.grouped:.0%} grouped, {self.open_groups:,} open groups{traced}"

    @property
    def slug(self) -> str:
        traced = f"-traced{int(self.traced * 100)}" if self.traced else ""
        return f"{self.size}b-{int(self.grouped * 100)}pct-{self.open_groups}g{traced}"


KEY = Workload(1_000, 0.5, 10_000)  # saturated: every destination always busy
# Unsaturated: open groups a quarter of the destinations (12 transfer partitions, 16
# receive queues), so exclusivity is on and ordinary messages find free destinations.
# The ratio line's workload.
UNSATURATED = Workload(1_000, 0.5, 3)
HEADLINES = {"unsaturated": UNSATURATED, "saturated": KEY}
# Tracing's cost: the unsaturated headline, every message traced (the most spans a unit makes),
# and one in ten (what a sampling Sender leaves: the rest cost a header scan).
TRACED = Workload(1_000, 0.5, 3, traced=1.0)
TRACED_10 = Workload(1_000, 0.5, 3, traced=0.1)
# Redis capacity: the send and receive units' Redis cost on these (1 KB, 10,000 open).
ORDINARY = Workload(1_000, 0.0, 10_000)
GROUPED_ONLY = Workload(1_000, 1.0, 10_000)
# Redis CPU per grouped message through both sides, µs (issue 30)
SCRIPT_GOAL_US = 6.0


@dataclass(frozen=True)
class BenchSpec:
    # Messages per filled topic: about this many bytes of payload, within [min, max].
    # Enough for a few seconds of every stage (the window is read every POLL_S).
    bytes_per_run: int = 40_000_000
    min_messages: int = 8_000
    max_messages: int = 40_000
    repeats: int = 5  # side-by-side rounds of each headline (median)
    latency_seconds: float = 6.0
    latency_warmup_s: float = 1.5
    # Offered loads of the latency runs: these fixed rates (msg/s) and these fractions
    # of the whole path's measured maximum (0.5: "half load").
    latency_rates: tuple[float, ...] = (1_000.0,)
    latency_fractions: tuple[float, ...] = (0.25, 0.5)
    sizes: tuple[int, ...] = SIZES
    grouped: tuple[float, ...] = GROUPED
    open_groups: tuple[int, ...] = OPEN_GROUPS
    headlines: tuple[str, ...] = ("unsaturated", "saturated")
    java: bool = True  # the Java relay stages (needs javac and the cached jars)
    ha: bool = True  # the three-broker row (starts and stops its own cluster)
    cluster: bool = True  # the Redis Cluster row (starts and stops its own, if none runs)
    seed: int = 7
    grouped_only_messages: int = 120_000  # 0: as the others

    def messages(self, size: int) -> int:
        return max(self.min_messages, min(self.max_messages, self.bytes_per_run // size))

    def messages_for(self, w: Workload) -> int:
        """A filled topic's count: `messages`, but the Redis stage's grouped workload gets
        `grouped_only_messages`, so that its steady part (once its groups are open, after
        about 2 messages per group) is long beside a unit's few batches."""
        n = self.messages(w.size)
        return max(n, self.grouped_only_messages) if w == GROUPED_ONLY else n

    def workloads(self) -> list[Workload]:
        """The matrix, then the headline workloads it does not hold."""
        out = [
            Workload(s, g, o) for s in self.sizes for g in self.grouped for o in self.open_groups
        ]
        return out + [w for w in self.headline_workloads().values() if w not in out]

    def headline_workloads(self) -> dict[str, Workload]:
        return {name: HEADLINES[name] for name in self.headlines}

    def key(self) -> Workload:
        """The saturated headline, or the nearest this (reduced) spec measures."""
        matrix = [
            Workload(s, g, o) for s in self.sizes for g in self.grouped for o in self.open_groups
        ]
        if KEY in matrix or not matrix:
            return KEY
        return min(
            matrix,
            key=lambda w: (abs(w.size - KEY.size), abs(w.grouped - KEY.grouped), -w.open_groups),
        )

    def ratio_workload(self) -> Workload:
        """The ratio line's workload: the unsaturated headline if measured."""
        heads = self.headline_workloads()
        return heads.get("unsaturated") or heads.get("saturated") or self.key()

    def offered_loads(self, maximum: float) -> list[float]:
        """The latency runs' offered loads for a whole path that reached `maximum` msg/s."""
        rates = [r for r in self.latency_rates if r < maximum] + [
            round(maximum * f, -1) for f in self.latency_fractions
        ]
        return sorted({r for r in rates if r > 0})


@dataclass
class Throughput:
    stage: str
    workload: Workload
    processes: int
    messages: int  # counted between the first and the last commit
    seconds: float
    cpu_s: float
    redis_round_trips: int = 0
    messages_in: int = 0
    # Redis's own cost over the run (INFO commandstats and INFO cpu; units only).
    redis_script_calls: int = 0
    redis_script_us: float = 0.0  # server time inside the scripts (EVALSHA & co.)
    redis_cpu_s: float = 0.0  # the server's CPU seconds (user + system), all it did
    redis_main_cpu_s: float = 0.0  # the same, its main thread only (where commands run)
    # Redis's CPU over the run's steady part (measure.SteadyRedis), and its messages
    steady_redis_cpu_s: float = 0.0
    steady_redis_messages: int = 0
    # where the processes' time went (ops/harness/benchmark/phases.py): batches committed,
    # and phase -> µs summed over them
    batches: int = 0
    phases: dict[str, int] = field(default_factory=dict)

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_s(self) -> float:
        return self.msg_s * self.workload.size / 1e6

    @property
    def cpu_s_per_million(self) -> float:
        return self.cpu_s / self.messages * 1e6 if self.messages else 0.0

    @property
    def round_trips_per_msg(self) -> float:
        return self.redis_round_trips / self.messages_in if self.messages_in else 0.0

    @property
    def redis_us_per_call(self) -> float:
        return self.redis_script_us / self.redis_script_calls if self.redis_script_calls else 0.0

    @property
    def messages_per_call(self) -> float:
        return self.messages_in / self.redis_script_calls if self.redis_script_calls else 0.0

    @property
    def redis_script_us_per_msg(self) -> float:
        """Script time per routed message: usec per call / messages per call."""
        return self.redis_script_us / self.messages_in if self.messages_in else 0.0

    @property
    def redis_cpu_us_per_msg(self) -> float:
        return self.redis_cpu_s * 1e6 / self.messages_in if self.messages_in else 0.0

    @property
    def steady_redis_cpu_us_per_msg(self) -> float:
        if not self.steady_redis_messages:
            return 0.0
        return self.steady_redis_cpu_s * 1e6 / self.steady_redis_messages

    @property
    def redis_main_cpu_us_per_msg(self) -> float:
        return self.redis_main_cpu_s * 1e6 / self.messages_in if self.messages_in else 0.0


@dataclass
class Latency:
    path: str
    rate: float  # offered, messages/s
    count: int
    p50_ms: float
    p99_ms: float
    p999_ms: float


SEGMENTS = (  # of a traced message's path (ops/harness/benchmark/trace.py)
    "sent -> on transfer topic",
    "-> committed there",
    "-> on receive queue",
    "-> committed there",
    "end to end",
)


@dataclass
class Trace:
    path: str
    rate: float
    messages: int
    p50_ms: list[float]  # per SEGMENTS
    p99_ms: list[float]
    # role -> timing -> (mean ms, count), from the units' own histograms
    unit_ms: dict[str, dict[str, tuple[float, int]]] = field(default_factory=dict)
    batch: dict[str, float] = field(default_factory=dict)  # role -> messages per commit


@dataclass
class Results:
    spec: BenchSpec
    throughput: list[Throughput] = field(default_factory=list)
    latency: list[Latency] = field(default_factory=list)
    # Per headline ("unsaturated", "saturated"): side-by-side rounds of msg/s,
    # {stage: msg/s} with the Python relay, the Java relay (if run) and the send unit.
    rounds: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    traces: list[Trace] = field(default_factory=list)
    batch_size: int = 500  # the units' unit.batch_size in this run
    max_batch_size: int = 500  # ... and unit.max_batch_size (batches grow to it under a backlog)
    # The routing scripts' own cost, without Kafka (ops/harness/benchmark/scriptcost.py):
    # its report's lines
    scripts: list[str] = field(default_factory=list)
    # The Redis Cluster stage's runs (ops/harness/benchmark/cluster.py)
    cluster: list[ClusterRun] = field(default_factory=list)

    def typical(self, stage: str, w: Workload, processes: int = 1) -> float:
        """The median msg/s of every run of a stage on a workload (0 if none)."""
        runs = [
            t.msg_s
            for t in self.throughput
            if t.stage == stage and t.workload == w and t.processes == processes
        ]
        return median(runs) if runs else 0.0

    def _against(self, stage: str | None, w: Workload, processes: int) -> float:
        if stage is None:
            return 0.0
        # The relay's cost does not depend on grouping: else the same size's key workload.
        return self.typical(stage, w, processes) or self.typical(
            stage, Workload(w.size, KEY.grouped, KEY.open_groups), processes
        )

    def baseline(self, t: Throughput) -> float:
        """What a stage's throughput is compared with: its raw (Python) relay, same
        message size, median of its runs."""
        return self._against(BASELINES.get(t.stage), t.workload, t.processes)

    def java_baseline(self, t: Throughput) -> float:
        """The same against Kafka's own Java client doing the same hop(s)."""
        return self._against(JAVA_BASELINES.get(t.stage), t.workload, t.processes)

    def tracing_cost(self, stage: str, w: Workload) -> tuple[Throughput, Throughput] | None:
        """A unit stage's runs with tracing off and on, side by side (None if not run)."""
        off, on = self.find(stage + TRACING_OFF, w), self.find(stage + TRACING_ON, w)
        return (off, on) if off and on and off.msg_s and off.cpu_s_per_million else None

    def find(self, stage: str, w: Workload, processes: int = 1) -> Throughput | None:
        for t in self.throughput:
            if t.stage == stage and t.workload == w and t.processes == processes:
                return t
        return None

    def cpu(self, stage: str, w: Workload) -> float:
        """The median CPU seconds per million messages of a stage's runs on a workload (0 if
        none)."""
        runs = [
            t.cpu_s_per_million for t in self.throughput if t.stage == stage and t.workload == w
        ]
        return median(runs) if runs else 0.0

    def round_ratio(self, headline: str, num: str = SEND, den: str = PY_RELAY) -> float:
        """The median over a headline's side-by-side rounds of num / den (0 if none)."""
        ratios = [r[num] / r[den] for r in self.rounds.get(headline, []) if r.get(den) and num in r]
        return median(ratios) if ratios else 0.0

    def ratio_headline(self) -> str:
        return next((h for h in ("unsaturated", "saturated") if self.rounds.get(h)), "")

    @property
    def ratio(self) -> float:
        """Send unit / raw relay on the ratio line's workload (the unsaturated headline):
        the median of its side-by-side rounds."""
        head = self.ratio_headline()
        return self.round_ratio(head) if head else 0.0

    def latency_at(self, path: str, rate: float) -> Latency | None:
        return next((x for x in self.latency if x.path == path and x.rate == rate), None)
