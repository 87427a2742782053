"""The `router` console script: a thin click layer over library functions."""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Protocol

import click
from confluent_kafka.admin import AdminClient

from router import __version__
from router.backends.kafka.clients import admin_config
from router.backends.redis.client import await_cluster, redis_client
from router.cli.acls import acls_group
from router.cli.spark import spark as spark_commands
from router.cli.table import table as table_commands
from router.config.settings import RouterSettings, load_settings
from router.console.server import serve as serve_console
from router.metrics.registry import read_all
from router.security.kafka import KafkaRefused
from router.security.redis import RedisRefused
from router.sweeper.loop import Sweeper
from router.topology.side import side_spec
from router.topology.topics import ensure_topics, plan
from router.unit.loop import FatalUnitError, TransferUnit
from router.unit.relay import RelaySteps, relay_spec
from router.utils.faults import Faults

log = logging.getLogger("router.cli")


class _Stoppable(Protocol):
    def request_stop(self) -> None: ...
    def run(self) -> int: ...


def _settings(ctx: click.Context) -> RouterSettings:
    settings: RouterSettings = ctx.obj["settings"]
    return settings


def _run_until_signalled(process: _Stoppable, role: str) -> None:
    """SIGTERM/SIGINT: finish the current batch, commit, leave the group, exit 0.

    With ROUTER_PID_DIR set (the Makefile sets it to .stack/run/units), the process
    records itself there while it runs, so that `make stack-down` can stop it gracefully."""

    def stop(signum: int, _frame: Any) -> None:
        log.info("received %s: stopping after the current batch", signal.Signals(signum).name)
        process.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # `kill -USR1 <pid>` writes every thread's stack to the log, even while the process
    # is blocked inside the Kafka client: the first thing to look at if a unit seems stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    pid_dir = os.environ.get("ROUTER_PID_DIR")
    pid_file = Path(pid_dir) / f"{role}-{os.getpid()}.pid" if pid_dir else None
    if pid_file is not None:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{os.getpid()}\n")
    try:
        code = process.run()
    finally:
        if pid_file is not None:
            pid_file.unlink(missing_ok=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="router")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="ROUTER_CONFIG",
    help="TOML configuration file (env: ROUTER_CONFIG). ROUTER_* variables override it.",
)
@click.option(
    "--log-level",
    default="INFO",
    envvar="ROUTER_LOG_LEVEL",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.pass_context
def cli(ctx: click.Context, config_file: Path | None, log_level: str) -> None:
    """Order-guaranteeing routing layer on Kafka."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s [%(process)d] %(message)s",
    )
    try:
        ctx.obj = {"settings": load_settings(config_file)}
    except Exception as exc:  # a configuration error is the user's to fix: say what
        raise click.ClickException(f"invalid configuration: {exc}") from exc


# ---------------------------------------------------------------------- roles


@cli.command("send-unit")
@click.pass_context
def send_unit(ctx: click.Context) -> None:
    """Run a send-side transfer unit (consumes the send queues)."""
    _run_unit(_settings(ctx), "send")


@cli.command("receive-unit")
@click.pass_context
def receive_unit(ctx: click.Context) -> None:
    """Run a receive-side transfer unit (consumes the transfer topic)."""
    _run_unit(_settings(ctx), "receive")


def _run_unit(settings: RouterSettings, side: str, relay: bool = False) -> None:
    # Test-only fault injection (see router/utils/faults.py); off unless ROUTER_FAULTS is set.
    faults = Faults(os.environ.get("ROUTER_FAULTS", ""))
    spec = side_spec(settings, side)  # type: ignore[arg-type]
    _await_redis(settings)
    if relay:
        unit = TransferUnit(
            settings, relay_spec(spec), kind="relay", steps=lambda _: RelaySteps(spec)
        )
    else:
        unit = TransferUnit(settings, spec, faults=faults)
    try:
        _run_until_signalled(unit, unit.role)
    except (FatalUnitError, RedisRefused, KafkaRefused) as exc:
        log.critical("%s", exc)
        sys.exit(2)


def _await_redis(settings: RouterSettings) -> None:
    """A Redis Cluster that does not answer yet is waited for, as one Redis is."""
    u = settings.unit
    await_cluster(settings.redis, u.backoff_initial_ms / 1000, u.backoff_max_ms / 1000)


@cli.command()
@click.option("--side", type=click.Choice(["send", "receive"]), required=True)
@click.pass_context
def relay(ctx: click.Context, side: str) -> None:
    """Run a raw relay: a unit without routing (the benchmark's baseline; no guarantees
    for groups). Same sources and destination topics as a unit of SIDE."""
    _run_unit(_settings(ctx), side, relay=True)


@cli.command()
@click.option("--once", is_flag=True, help="Run one sweep round and exit.")
@click.pass_context
def sweeper(ctx: click.Context, once: bool) -> None:
    """Run the sweeper: remove idle entries, publish abandoned-group events."""

    settings = _settings(ctx)
    _await_redis(settings)
    s = Sweeper(settings)
    if once:
        report = s.run_once()
        click.echo(json.dumps(report.__dict__))
        return
    try:
        _run_until_signalled(s, "sweeper")
    except (FatalUnitError, RedisRefused, KafkaRefused) as exc:
        log.critical("%s", exc)
        sys.exit(2)


# ---------------------------------------------------------------------- topics


@cli.group()
def topics() -> None:
    """Kafka topics of the topology."""


@topics.command("create")
@click.pass_context
def topics_create(ctx: click.Context) -> None:
    """Create the topics the topology needs (idempotent)."""

    settings = _settings(ctx)
    report = ensure_topics(settings, AdminClient(admin_config(settings.kafka)))
    for name in report.created:
        click.echo(f"created  {name}")
    for name in report.grown:
        click.echo(f"grown    {name}")
    for name in sorted(set(report.existing) - set(report.grown)):
        click.echo(f"exists   {name}")
    for warning in report.warnings:
        click.echo(f"warning  {warning}", err=True)


@topics.command("plan")
@click.pass_context
def topics_plan(ctx: click.Context) -> None:
    """Show the topics the topology needs, without touching Kafka."""

    for spec in plan(_settings(ctx)):
        click.echo(f"{spec.name:40} {spec.partitions:4} partitions  {spec.role}")


# ---------------------------------------------------------------------- observing


@cli.command()
@click.pass_context
def metrics(ctx: click.Context) -> None:
    """Counters of every live unit and sweeper of the topology, as JSON."""

    settings = _settings(ctx)
    data = read_all(redis_client(settings.redis), settings.redis.key_prefix, settings.topology.name)
    click.echo(json.dumps(data, indent=2, sort_keys=True))


@cli.command()
@click.option("--ready", is_flag=True, help="Ask /readyz instead of /healthz.")
@click.option("--host", default=None, help="Default: metrics.host (0.0.0.0 means loopback).")
@click.option("--port", type=int, default=None, help="Default: metrics.port.")
@click.option("--timeout", default=5.0, show_default=True, help="Seconds to wait for an answer.")
@click.pass_context
def health(
    ctx: click.Context, ready: bool, host: str | None, port: int | None, timeout: float
) -> None:
    """Ask this host's router process its /healthz (or /readyz): exit 0 if it answers 200,
    1 otherwise (a container healthcheck, or an operator's probe)."""

    m = _settings(ctx).metrics
    port = m.port if port is None else port
    if not port:
        raise click.ClickException("no metrics port: set metrics.port (ROUTER_METRICS__PORT)")
    host = host or ("127.0.0.1" if m.host in ("0.0.0.0", "::", "") else m.host)
    url = f"http://{host}:{port}/{'readyz' if ready else 'healthz'}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body = answer.read().decode("utf-8", "replace").strip()
            status = answer.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read().decode("utf-8", "replace").strip(), exc.code
    except OSError as exc:
        click.echo(f"{url}: no answer ({exc})", err=True)
        sys.exit(1)
    click.echo(f"{url}: {status} {body}")
    sys.exit(0 if status == 200 else 1)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=8400, show_default=True, help="0: any free port.")
@click.pass_context
def console(ctx: click.Context, host: str, port: int) -> None:
    """Serve the live status page: per side, each destination's open groups, the waiting
    room, stopped groups, dead letters, expiries and per-role throughput (reads only)."""

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    serve_console(
        _settings(ctx), host, port, stop, lambda url: click.echo(f"serving {url}", nl=True)
    )


@cli.group("config")
def config_group() -> None:
    """The effective configuration."""


@config_group.command("show")
@click.pass_context
def config_show(ctx: click.Context) -> None:
    """Print the effective settings (secrets masked) as JSON."""
    click.echo(_settings(ctx).model_dump_json(indent=2))


cli.add_command(table_commands)
cli.add_command(acls_group)
cli.add_command(spark_commands)


def main() -> None:
    cli()
