"""Spark benchmark driver (`make spark-bench`): rate source -> Spark sender -> router ->
Spark receiver; sustained msg/s and group-completion latency.

    .venv/bin/python -m ops.spark_bench --help

The logic lives in `ops.harness.spark.bench_flow`; this is its command line.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ops.harness.console import Console
from ops.harness.signals import exit_on_sigterm
from ops.harness.spark import bench_report
from ops.harness.spark.bench_flow import REAL_TIME, SENDERS, BenchSpec, run_bench
from ops.harness.stack.localstack import ensure_stack
from ops.harness.stack.pipeline import PipelineSpec
from router.config import RouterSettings, load_settings
from spark_jobs.session import SparkOptions, build_session, key_values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ops.spark_bench",
        description="Spark benchmark: rate source -> Spark sender -> router -> Spark "
        "receiver; sustained msg/s and group-completion latency (exit 1 if the output is "
        "incomplete; the goal is reported, met or not).",
    )
    p.add_argument(
        "--rates",
        default="5000,2500",
        help="Offered messages per second, one run each, side by side in one session "
        "(default: %(default)s: the goal's load, and half of it)",
    )
    p.add_argument("--rate", type=int, help="One run at this rate (instead of --rates)")
    p.add_argument("--seconds", type=float, help="Seconds of load per run (default 150)")
    p.add_argument("--warmup", type=float, help="Seconds left out of the figures (default 75)")
    p.add_argument(
        "--quick", action="store_true", help="A short check: one run, 500 msg/s, 25 s, 8 s warm-up"
    )
    p.add_argument("--max-lines", type=int, help="A purchase order's lines: 1..N (default 40)")
    p.add_argument("--max-offsets-per-trigger", type=int, help="Lever: bound receiver batches")
    p.add_argument("--fair", action="store_true", help="Lever: FAIR scheduler pools")
    p.add_argument("--linger-ms", type=int, help="Lever: sender producer linger.ms")
    p.add_argument("--compression", help="Lever: sender producer compression.type (lz4, ...)")
    p.add_argument(
        "--senders",
        default=",".join(SENDERS),
        help="Which Spark senders, each run at every rate (default: %(default)s): the "
        "micro-batch sender on the rate source, and the real-time sender on an upstream "
        "topic the rate source fills",
    )
    p.add_argument(
        "--checkpoint-seconds",
        type=float,
        help="The real-time sender's checkpoint interval (default 5)",
    )
    p.add_argument("--trigger-seconds", type=float, default=1.0)
    p.add_argument("--send-units", type=int, default=2)
    p.add_argument("--receive-units", type=int, default=2)
    p.add_argument("--transfer-partitions", type=int, default=4)
    p.add_argument("--receive-queues", type=int, default=4)
    p.add_argument(
        "--master",
        help="(default: local[2]; local[3] for the real-time sender, whose long-lived task "
        "holds a slot: the other queries keep two)",
    )
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--jars-dir", type=Path)
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE")
    p.add_argument("--results", type=Path, default=Path(".results/spark-bench"))
    p.add_argument("--keep", action="store_true", help="Keep the topics, output, checkpoints")
    p.add_argument("--config", type=Path, help="Router TOML configuration")
    return p


def specs_of(args: argparse.Namespace) -> list[BenchSpec]:
    """The runs asked for: one per rate of `--rates`, or one (`--rate`, `--quick`)."""
    base = (
        BenchSpec(rate=500, seconds=25, warmup_s=8, drain_timeout_s=45)
        if args.quick
        else (BenchSpec())
    )
    producer = {"kafka.linger.ms": args.linger_ms, "kafka.compression.type": args.compression}
    levers = {
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "max_lines": args.max_lines,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "trigger_seconds": args.trigger_seconds,
        "fair": args.fair or None,
        "checkpoint_seconds": args.checkpoint_seconds,
        "producer": tuple((k, str(v)) for k, v in producer.items() if v is not None) or None,
    }
    spec = replace(base, **{k: v for k, v in levers.items() if v is not None})
    senders = [x.strip() for x in str(args.senders).split(",") if x.strip()]
    if not senders or any(x not in SENDERS for x in senders):
        raise SystemExit(f"--senders takes some of {','.join(SENDERS)}, not {args.senders!r}")
    if args.rate is not None:
        rates = [args.rate]
    elif args.quick:
        rates = [spec.rate]
    else:
        rates = [int(r) for r in str(args.rates).split(",") if r.strip()]
    if not rates or min(rates) <= 0:
        raise SystemExit(f"--rates needs positive rates, not {args.rates!r}")
    return [replace(spec, rate=r, sender=x) for r in rates for x in senders]


def master_of(args: argparse.Namespace, spec: BenchSpec) -> str:
    """--master, or the default: two task slots for the micro-batch queries, as many as
    the cores (more let Spark's tasks starve the units and the broker of the same two
    cores), and one more for the real-time sender's long-lived task."""
    if args.master:
        return str(args.master)
    return "local[3]" if spec.sender == REAL_TIME else "local[2]"


def main(argv: list[str] | None = None, settings: RouterSettings | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)-7s %(name)s %(message)s"
    )
    specs = specs_of(args)
    base = settings or load_settings(args.config)
    console = Console()
    ensure_stack(base, console.say)
    conf = key_values(args.spark_conf, "--spark-conf")
    if any(spec.fair for spec in specs):
        conf["spark.scheduler.mode"] = "FAIR"

    def session(master: str) -> Any:
        return build_session(
            SparkOptions(
                master=master,
                app_name="router-spark-bench",
                driver_memory=args.driver_memory,
                jars_dir=args.jars_dir,
                conf=conf,
            )
        )

    pipeline_spec = PipelineSpec(
        send_units=args.send_units,
        receive_units=args.receive_units,
        transfer_partitions=args.transfer_partitions,
        receive_queues=args.receive_queues,
    )
    out_dir = args.results / f"spark-bench-{secrets.token_hex(3)}"
    results = []
    spark, master = None, None
    try:
        for i, spec in enumerate(specs):
            if master != master_of(args, spec):  # a session of its own for another master
                if spark is not None:
                    spark.stop()
                master = master_of(args, spec)
                spark = session(master)
            # Named after the bench too: the run's topics never meet an earlier bench's.
            run_dir = out_dir / f"{out_dir.name[-6:]}-{i + 1}-{spec.rate}-{spec.sender}"
            results.append(
                run_bench(spark, base, spec, pipeline_spec, run_dir, keep=args.keep, out=console)
            )
            console.table(["figure", "value", "note"], bench_report.table_rows(results[-1]))
    finally:
        if spark is not None:
            spark.stop()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "results.md").write_text(bench_report.markdown(results))
    console.say(f"results: {out_dir / 'results.md'}, {out_dir / 'results.json'}")
    failures = [f for r in results for f in r["failures"]]
    for failure in failures:
        console.say(f"   {failure}")
    for r in results:
        console.say(bench_report.verdict(r))
    return 0 if all(r["complete"] for r in results) and not failures else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
