"""The tracing rows of `make bench`: each unit with tracing off and on, side by side, on a
workload whose every message carries a sampled `traceparent` (a span per message: the most a
unit makes; fewer sampled traces cost less), exporting by OTLP to a Jaeger of the run's own
(ops/jaeger.sh, in-memory, started and stopped here). Off, a unit never looks at the
header: the off rows are the cost of tracing off. Skipped, saying why, where Jaeger cannot
be built."""

from __future__ import annotations

from ops.harness.benchmark.context import Benching
from ops.harness.benchmark.model import RECEIVE, SEND, TRACED, TRACING_OFF, TRACING_ON
from ops.harness.stack.jaeger import Jaeger, JaegerMissing

TRACING_STEPS = 6  # Jaeger up, fill, two stages per side
SIDES = (SEND, RECEIVE)


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
        bench.fill_all([TRACED])
        for stage in SIDES:
            bench.run_stage(stage + TRACING_OFF, TRACED)
            bench.run_stage(stage + TRACING_ON, TRACED, env=env)
        services = jaeger.services() or []
        if not {"router-send-unit", "router-receive-unit"} <= set(services):
            raise RuntimeError(f"the traced units' spans did not reach Jaeger: {services}")
