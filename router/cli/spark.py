"""`router spark ...`: the Spark jobs (`spark_jobs/`) behind the router's own CLI.

Each command hands its arguments to the job's `main` unchanged (`router spark sender
--help` shows them), with the router's settings (`--config`, ROUTER_* variables) as the
defaults for Kafka and the topology. pyspark is imported only when a job runs.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

_PASS_THROUGH: dict[str, Any] = {
    "ignore_unknown_options": True,
    "allow_extra_args": True,
    "help_option_names": [],
}


def _run(module: str, args: tuple[str, ...], ctx: click.Context) -> None:
    job = importlib.import_module(f"spark_jobs.{module}")
    argv = list(args)
    root = ctx.find_root()
    config = root.params.get("config_file")
    if config is not None and "--config" not in argv:
        argv = ["--config", str(config), *argv]
    sys.exit(job.main(argv))


@click.group()
def spark() -> None:
    """Spark Structured Streaming jobs as senders and receivers (needs the spark extra)."""


@spark.command(context_settings=_PASS_THROUGH)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def sender(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Business records (files, or the rate source) -> groups on the send queues."""
    _run("sender", args, ctx)


@spark.command(context_settings=_PASS_THROUGH)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def receiver(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Receive queues -> order checks, reassembled groups and violations in Parquet."""
    _run("receiver", args, ctx)


@spark.command()
def jars() -> None:
    """The cached connector jars, comma-separated (for spark-submit --jars)."""
    session = importlib.import_module("spark_jobs.session")
    click.echo(",".join(session.connector_jars()))
