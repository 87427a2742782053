"""The tracing rows of `make bench`: each unit with tracing off and on, side by side, on a
workload whose every message carries a sampled `traceparent` (a span per message: the most a
unit makes), and the send unit again with one message in ten sampled (the others carry an
unsampled one: a header scan each), exporting by OTLP to a Jaeger of the run's own
(ops/jaeger.sh, in-memory, started and stopped here). Off, a unit never looks at the
header: the off rows are the cost of tracing off. Skipped, saying why, where Jaeger cannot
be built."""

from __future__ import annotations

from ops.harness.benchmark.context import Benching
from ops.harness.benchmark.model import (
    RECEIVE,
    SEND,
    TRACED,
    TRACED_10,
    TRACING_OFF,
    TRACING_ON,
)
from ops.harness.stack.jaeger import Jaeger, JaegerMissing

TRACING_STEPS = 9  # Jaeger up, two fills, two stages per side and workload
RUNS = ((SEND, TRACED), (RECEIVE, TRACED), (SEND, TRACED_10))


def run_tracing(bench: Benching) -> None:
    try:
        jaeger = Jaeger.start(bench.run_dir / f"{bench.id}.jaeger")
    except JaegerMissing as exc:
        bench.total_steps -= TRACING_STEPS - 1
        bench.progress(f"tracing rows skipped: Jaeger cannot be built here ({exc})")
        return
    with jaeger:
        bench.progress(f"jaeger up: OTLP at {jaeger.otlp_endpoint}")
        env = {
            "ROUTER_TRACING__ENABLED": "true",
            "ROUTER_TRACING__OTLP_ENDPOINT": jaeger.otlp_endpoint,
        }
        bench.fill_all([TRACED, TRACED_10])
        for stage, w in RUNS:
            bench.run_stage(stage + TRACING_OFF, w)
            bench.run_stage(stage + TRACING_ON, w, env=env)
        services = jaeger.services() or []
        if not {"router-send-unit", "router-receive-unit"} <= set(services):
            raise RuntimeError(f"the traced units' spans did not reach Jaeger: {services}")
