"""The order of a benchmark run, as a list of steps (each one progress step or more), and
the parts a run can be limited to (`python -m ops.bench --only java`):

    fill      the workloads' topics (added by itself for the parts that need them)
    relays    raw relays (both sides) and the Java relay, per message size
    units     send and receive unit on every workload (the Redis cost is measured here),
              and the routing scripts' own cost without Kafka (ops/harness/benchmark/scriptcost.py)
    headline  the side-by-side rounds of each headline workload (the ratio line)
    chained   whole path against two chained raw relays and two chained Java relays
    scaling   1 against 2 processes
    latency   end-to-end latency over offered load (after a whole-path run for the maximum)
    java      the Java stages alone: relay and chained relays, at the key workload
    redis     Redis's cost alone: send and receive unit on 1 KB ordinary and grouped traffic,
              and the scripts' own cost
    ha        send unit against raw relay on a three-broker cluster (ops/harness/benchmark/ha.py)
    cluster   grouped traffic through both sides with the tables on a 3-primary Redis Cluster,
              1 cell and 3 cells: Redis CPU per message per primary
              (ops/harness/benchmark/cluster.py)
    tracing   send and receive unit with tracing off and on, every message traced, and the send
              unit with one in ten; spans to a Jaeger of the run's own
              (ops/harness/benchmark/tracing.py)
    trace     where the latency goes: whole path and chained Java relays traced at the
              latency runs' loads (ops/harness/benchmark/trace.py; not in the full run)
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import partial

from ops.harness.benchmark.cluster import CLUSTER_STEPS, run_cluster
from ops.harness.benchmark.context import Benching
from ops.harness.benchmark.ha import HA_STEPS, run_ha
from ops.harness.benchmark.model import (
    GROUPED_ONLY,
    JAVA_CHAINED,
    JAVA_RELAY,
    ORDINARY,
    PATH,
    PY_CHAINED,
    PY_RELAY,
    RECEIVE,
    SEND,
    Workload,
)
from ops.harness.benchmark.scriptcost import script_costs
from ops.harness.benchmark.trace import run_trace
from ops.harness.benchmark.tracing import TRACING_STEPS, run_tracing

PARTS = (
    "relays", "units", "headline", "chained", "scaling", "latency", "java", "redis", "ha", "trace",
    "tracing", "cluster",
)  # fmt: skip
Step = tuple[int, Callable[[], object]]  # (progress steps it makes, action)


def plan(bench: Benching, only: Collection[str] = ()) -> list[Step]:
    unknown = set(only) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}: choose from {', '.join(PARTS)}")
    spec = bench.spec
    optional = {"ha": spec.ha, "cluster": spec.cluster}
    parts = set(only) or {
        p for p in PARTS if p not in ("java", "redis", "trace") and optional.get(p, True)
    }
    java = spec.java
    key = spec.key()
    heads = spec.headline_workloads()
    size_key = [Workload(s, key.grouped, key.open_groups) for s in spec.sizes]
    results = bench.results
    steps: list[Step] = []

    def round_(name: str, w: Workload, with_java: bool) -> None:
        r = {PY_RELAY: bench.run_stage(PY_RELAY, w).msg_s}
        if with_java:
            r[JAVA_RELAY] = bench.run_stage(JAVA_RELAY, w).msg_s
        r[SEND] = bench.run_stage(SEND, w).msg_s
        results.rounds.setdefault(name, []).append(r)

    def latency(paths: list[str]) -> None:
        path = results.find(PATH, key)
        if path is None:
            raise RuntimeError("no whole-path run to take the latency runs' loads from")
        loads = spec.offered_loads(path.msg_s)
        bench.total_steps += len(loads) * len(paths) - (
            (len(spec.latency_rates) + len(spec.latency_fractions)) * len(paths)
        )
        for rate in loads:
            for p in paths:
                bench.run_latency(p, key, rate)

    def trace(paths: list[str]) -> None:
        path = results.find(PATH, key)
        if path is None:
            raise RuntimeError("no whole-path run to take the trace's loads from")
        for rate in spec.offered_loads(path.msg_s):
            for p in paths:
                results.traces.append(run_trace(bench, p, key, rate))

    def stage(name: str, w: Workload, processes: int = 1) -> None:
        steps.append((1, lambda: bench.run_stage(name, w, processes)))

    needed: list[Workload] = []
    if parts & {"relays", "chained"}:
        needed += size_key
    if "units" in parts:
        needed += spec.workloads()
    if "headline" in parts:
        needed += heads.values()
    if parts & {"scaling", "latency", "java", "trace"}:
        needed.append(key)
    if "redis" in parts:
        needed += [ORDINARY, GROUPED_ONLY]
    fills = list(dict.fromkeys(needed))
    if fills:
        steps.append((len(fills), lambda: bench.fill_all(fills)))
    if fills and not only:
        # A first run warms the broker, the page cache and the JVM; it is not reported.
        stage(PY_RELAY, key)
        stage(SEND, key)
        steps.append((0, results.throughput.clear))
    if "relays" in parts:
        for w in size_key:
            if w not in heads.values() or "headline" not in parts:
                stage(PY_RELAY, w)
            stage("raw relay (receive side)", w)
            if java:
                stage(JAVA_RELAY, w)
    if "units" in parts:
        for w in spec.workloads():
            if w not in heads.values() or "headline" not in parts:
                stage(SEND, w)
            stage(RECEIVE, w)
    if "headline" in parts:
        for name, w in heads.items():
            # Java's relay only in the ratio line's rounds: its cost does not depend on
            # grouping, and `relays` measures it at the saturated workload.
            with_java = java and w == spec.ratio_workload()
            for _ in range(spec.repeats):
                steps.append((2 + with_java, partial(round_, name, w, with_java)))
    if "redis" in parts:
        for w in (ORDINARY, GROUPED_ONLY):
            stage(SEND, w)
            stage(RECEIVE, w)
    if parts & {"units", "redis"}:
        batches = max(10, spec.max_messages // 500)  # as many messages as a unit's run
        steps.append(
            (
                1,
                lambda: results.scripts.extend(
                    script_costs(bench.base.redis, batches, beside=spec.repeats)
                ),
            )
        )
    if "java" in parts:
        stage(JAVA_RELAY, key)
        stage(JAVA_CHAINED, key)
    if "chained" in parts:
        for w in size_key:
            stage(PY_CHAINED, w)
            if java:
                stage(JAVA_CHAINED, w)
            stage(PATH, w)
    if "scaling" in parts:
        stage(PY_RELAY, key, 2)
        stage(SEND, key, 2)
    if parts & {"latency", "trace"}:
        if "chained" not in parts:
            stage(PATH, key)  # the maximum the offered loads are fractions of
        paths = [PY_CHAINED, *([JAVA_CHAINED] if java else []), PATH]
        count = len(spec.latency_rates) + len(spec.latency_fractions)
        if "latency" in parts:
            steps.append((count * len(paths), partial(latency, paths)))
        if "trace" in parts:
            paths = [JAVA_CHAINED] if java else []
            steps.append((count * (len(paths) + 1), partial(trace, [*paths, PATH])))
    if "ha" in parts:
        steps.append((HA_STEPS, lambda: run_ha(bench)))
    if "tracing" in parts:
        steps.append((TRACING_STEPS, lambda: run_tracing(bench)))
    if "cluster" in parts:
        steps.append((CLUSTER_STEPS, lambda: run_cluster(bench)))

    return steps
