"""Spark demo driver (`make spark-demo`): Spark sender -> router -> Spark receiver.

    .venv/bin/python -m ops.spark_demo --help

The logic lives in `ops.harness.spark.demo_flow`; this is its command line.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
from pathlib import Path

from ops.harness.console import Console
from ops.harness.signals import exit_on_sigterm
from ops.harness.spark.demo_flow import SparkDemoSpec, run_spark_demo
from ops.harness.stack.localstack import ensure_stack
from ops.harness.stack.pipeline import PipelineSpec
from router.config import RouterSettings, load_settings
from spark_jobs import workload
from spark_jobs.session import SparkOptions, build_session, key_values, launched_by_spark_submit


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ops.spark_demo",
        description="Spark sender -> router -> Spark receiver, end to end, with a verdict "
        "(exit 1 if a guarantee broke).",
    )
    p.add_argument("--orders", type=int, default=200, help="Purchase orders (groups)")
    p.add_argument(
        "--documents",
        type=int,
        default=40,
        help="Documents (one message each; large ones go as segments)",
    )
    p.add_argument("--updates", type=int, default=600, help="Stock updates (ordinary)")
    p.add_argument("--max-lines", type=int, default=40)
    p.add_argument("--max-document-bytes", type=int, default=200_000)
    p.add_argument("--segment-bytes", type=int, default=4096)
    p.add_argument("--files", type=int, default=10, help="Input files, dropped one per second")
    p.add_argument("--send-units", type=int, default=2)
    p.add_argument("--receive-units", type=int, default=3)
    p.add_argument("--transfer-partitions", type=int, default=8)
    p.add_argument("--receive-queues", type=int, default=12)
    p.add_argument("--policy", choices=["share", "hold"], default="share")
    p.add_argument("--master", default="local[2]", help="(default: %(default)s)")
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--jars-dir", type=Path)
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE")
    p.add_argument("--timeout", type=float, default=600.0, help="Seconds for the whole flow")
    p.add_argument("--run-dir", type=Path, default=Path(".results/spark-demo"))
    p.add_argument("--keep", action="store_true", help="Keep the run's topics and tables")
    p.add_argument(
        "--config", type=Path, help="Router TOML configuration (default: $ROUTER_CONFIG)"
    )
    return p


def main(argv: list[str] | None = None, settings: RouterSettings | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)-7s %(name)s %(message)s"
    )
    base = settings or load_settings(args.config)
    run_id = f"spark-demo-{secrets.token_hex(3)}"
    console = Console()
    console.say(f"spark demo {run_id}: checking the stack")
    ensure_stack(base, console.say)
    if launched_by_spark_submit():
        console.say("   (under spark-submit: --master and the jars come from spark-submit)")
    spark = build_session(
        SparkOptions(
            master=args.master,
            app_name="router-spark-demo",
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
            jars_dir=args.jars_dir,
            conf=key_values(args.spark_conf, "--spark-conf"),
        )
    )
    spec = SparkDemoSpec(
        workload.BusinessWorkload(
            run_id,
            orders=args.orders,
            documents=args.documents,
            updates=args.updates,
            max_lines=args.max_lines,
            max_document_bytes=args.max_document_bytes,
        ),
        files=args.files,
        segment_bytes=args.segment_bytes,
        timeout_s=args.timeout,
    )
    pipeline_spec = PipelineSpec(
        send_units=args.send_units,
        receive_units=args.receive_units,
        transfer_partitions=args.transfer_partitions,
        receive_queues=args.receive_queues,
        busy_policy=args.policy,
    )
    try:
        result = run_spark_demo(
            spark, base, spec, pipeline_spec, args.run_dir / run_id, keep=args.keep, out=console
        )
    finally:
        spark.stop()
    return 0 if result.ok else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
