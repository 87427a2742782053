"""The `router` console script: a thin click layer over library functions."""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Protocol

import click
from confluent_kafka.admin import AdminClient

from router import __version__
from router.clients import admin_config, redis_client
from router.config import RouterSettings, load_settings
from router.faults import Faults
from router.metrics import read_all
from router.relay import RelaySteps, relay_spec
from router.room import STAGED, is_pseudo
from router.routing import Entry
from router.side import side_spec, table_for
from router.spark_cli import spark as spark_commands
from router.sweeper import Sweeper
from router.table import ManagementTable
from router.topics import ensure_topics, plan
from router.unit import FatalUnitError, TransferUnit

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
    # Test-only fault injection (see router/faults.py); off unless ROUTER_FAULTS is set.
    faults = Faults(os.environ.get("ROUTER_FAULTS", ""))
    spec = side_spec(settings, side)  # type: ignore[arg-type]
    if relay:
        unit = TransferUnit(
            settings, relay_spec(spec), kind="relay", steps=lambda _: RelaySteps(spec)
        )
    else:
        unit = TransferUnit(settings, spec, faults=faults)
    try:
        _run_until_signalled(unit, unit.role)
    except FatalUnitError as exc:
        log.critical("%s", exc)
        sys.exit(2)


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

    s = Sweeper(_settings(ctx))
    if once:
        report = s.run_once()
        click.echo(json.dumps(report.__dict__))
        return
    _run_until_signalled(s, "sweeper")


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


# ---------------------------------------------------------------------- tables


@cli.group()
def table() -> None:
    """Inspect and steer the management tables in Redis."""


_SIDE = click.option(
    "--side", type=click.Choice(["send", "receive"]), required=True, help="Which table."
)


@table.command("show")
@_SIDE
@click.option("--limit", default=50, show_default=True, help="At most this many entries.")
@click.pass_context
def table_show(ctx: click.Context, side: str, limit: int) -> None:
    """Entries (guarantee ID -> destination, update time, TTL), loads and counters."""

    settings = _settings(ctx)
    t = table_for(settings, side, redis_client(settings.redis))  # type: ignore[arg-type]
    now = t.now_ms()
    entries = t.entries()
    click.echo(f"{side} table of topology {settings.topology.name!r}: {len(entries)} open groups")
    click.echo(f"{'guarantee ID':32} {'destination':24} {'idle s':>8} {'ttl s':>8}  state")
    for gid, e in sorted(entries.items(), key=lambda kv: kv[1].updated_ms)[:limit]:
        state = e.state if e.state != "open" else "closing" if e.closing else "open"
        click.echo(
            f"{gid[:32]:32} {e.dest[:24]:24} {(now - e.updated_ms) / 1000:8.1f} "
            f"{e.ttl_ms / 1000:8.1f}  {state}"
        )
    click.echo("load (open groups per destination): " + json.dumps(t.loads(), sort_keys=True))
    inflight = sorted({dest for dest, _ in t.inflight()})
    click.echo("ordinary messages in flight to: " + (", ".join(inflight) or "-"))
    click.echo("counters: " + json.dumps(t.stats(), sort_keys=True))
    _show_room(t, entries, now, limit)


def _show_room(t: ManagementTable, entries: dict[str, Entry], now: int, limit: int) -> None:
    """The waiting room (busy policy `wait`): waiting groups oldest first, then the
    admitted ones whose parked messages are being drained, then the staged ones (whole-group
    delivery, until their final)."""
    room, admitted = t.room(), t.admitted()
    staged = sorted((e.opened_ms, g) for g, e in entries.items() if e.state == STAGED)
    click.echo(
        f"waiting room: {len(room)} waiting, {len(admitted)} admitted (draining), "
        f"{len(staged)} staged (whole groups until their final)"
    )
    if not room and not admitted and not staged:
        return
    shown = [*list(room)[:limit], *list(admitted)[:limit], *(g for _, g in staged[:limit])]
    states = t.room_state(shown)
    click.echo(f"{'guarantee ID':32} {'waiting s':>9} {'parked':>7}  destination")
    for gid in shown:
        st = states.get(gid)
        name = f"(ordinary of {gid[1:]})" if is_pseudo(gid) else gid
        since = room.get(gid, entries[gid].opened_ms if gid in entries else None)
        age = f"{(now - since) / 1000:9.1f}" if since is not None else f"{'-':>9}"
        staging = st is not None and st.state == STAGED
        dest = admitted.get(
            gid, "(staged until its final)" if staging else "(waits for a free one)"
        )
        click.echo(f"{name:32} {age} {st.parks if st else 0:7}  {dest}")


@table.command("release")
@_SIDE
@click.argument("guarantee_id")
@click.option("--yes", is_flag=True, help="Really remove the entry.")
@click.pass_context
def table_release(ctx: click.Context, side: str, guarantee_id: str, yes: bool) -> None:
    """Remove one entry by hand (its destination becomes free; later messages of the
    group start a new assignment)."""

    settings = _settings(ctx)
    t = table_for(settings, side, redis_client(settings.redis))  # type: ignore[arg-type]
    entry = t.entry(guarantee_id)
    if entry is None:
        raise click.ClickException(f"no entry for {guarantee_id!r} in the {side} table")
    if not yes:
        raise click.ClickException(f"{guarantee_id!r} -> {entry.dest}; add --yes to remove it")
    click.echo(f"released: {t.release([(guarantee_id, '*')])}")


# ---------------------------------------------------------------------- observing


@cli.command()
@click.pass_context
def metrics(ctx: click.Context) -> None:
    """Counters of every live unit and sweeper of the topology, as JSON."""

    settings = _settings(ctx)
    data = read_all(redis_client(settings.redis), settings.redis.key_prefix, settings.topology.name)
    click.echo(json.dumps(data, indent=2, sort_keys=True))


@cli.group("config")
def config_group() -> None:
    """The effective configuration."""


@config_group.command("show")
@click.pass_context
def config_show(ctx: click.Context) -> None:
    """Print the effective settings (secrets masked) as JSON."""
    click.echo(_settings(ctx).model_dump_json(indent=2))


cli.add_command(spark_commands)


def main() -> None:
    cli()
