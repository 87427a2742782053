"""What the benchmark's parts (`ops.harness.benchmark.plan`, `latency`, `trace`, `ha`,
`tracing`) read of the run that calls them (`ops.harness.benchmark.runner.Bench`): its
settings, spec, results and admin client, its stages, and its progress. A protocol, so that
the parts import neither the runner nor each other's caller."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from confluent_kafka.admin import AdminClient

from ops.harness.benchmark.model import BenchSpec, Latency, Results, Throughput, Workload
from ops.harness.stack.pipeline import Pipeline
from router.config import RouterSettings
from router.table.store.management import Side


class Benching(Protocol):
    @property
    def id(self) -> str:
        """The run's name: every topic it makes starts with it."""
        ...

    @property
    def base(self) -> RouterSettings: ...
    @property
    def spec(self) -> BenchSpec: ...
    @property
    def run_dir(self) -> Path: ...
    @property
    def results(self) -> Results: ...
    @property
    def admin(self) -> AdminClient: ...

    # The progress steps the run expects: a part that learns how many it makes (the
    # latency runs, once the whole path's maximum is known) corrects it.
    total_steps: int
    suffix: str  # appended to every stage's name (the servers it ran on, a variant)
    # Partitions of each filled topic, the stages' sources (a cell owns every n-th)
    partitions: int
    receive_queues: int  # of each stage's topology (a cell owns every n-th)

    def progress(self, text: str) -> None:
        """One progress step done, described."""
        ...

    def pipeline(self, tag: str, env: dict[str, str], metrics: bool = False) -> Pipeline:
        """A fresh topology of the run's shape (no processes started yet)."""
        ...

    def start(self, p: Pipeline, kind: str, side: Side, processes: int = 1) -> None:
        """Start `processes` of a stage's `kind` (unit, relay or java) on one side."""
        ...

    def fill_all(
        self, workloads: list[Workload] | None = None, counts: dict[Workload, int] | None = None
    ) -> None: ...
    def run_stage(
        self,
        stage: str,
        w: Workload,
        processes: int = 1,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> Throughput: ...
    def run_latency(self, path: str, w: Workload, rate: float) -> Latency: ...
    def cleanup(self) -> None:
        """Delete the run's topics."""
        ...

    def on_servers(self, base: RouterSettings, suffix: str) -> Benching:
        """The same run on other servers (`base`): its stages named with `suffix`, its
        results and progress this run's."""
        ...
