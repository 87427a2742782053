"""What `router table ...` commands share (`router.cli.table`): their options, the tables a
command names (by side, and by cell: `router.topology.cells`), and their output."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from router.backends.redis.client import redis_client
from router.config.settings import RouterSettings
from router.table import steer
from router.table.store.management import ManagementTable
from router.topology import cells
from router.topology.side import table_for

NOT_CONFIRMED = 3  # exit code: a steering command without --yes (nothing changed)
SIDES = ("send", "receive")

_JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
_YES = click.option("--yes", is_flag=True, help="Do it (without: print the plan, exit 3).")
_SIDE = click.option("--side", type=click.Choice(SIDES), required=True, help="Which side's table.")
_ANY_SIDE = click.option(
    "--side", type=click.Choice(SIDES), default=None, help="One side's table (default: both)."
)

_CELL = click.option(
    "--cell",
    type=click.IntRange(min=0),
    default=None,
    help="One cell's table (topology.cells > 1). Default: every cell; for a steering command "
    "the cell of its destination or group.",
)


def _table(ctx: click.Context, side: str, cell: int = 0) -> ManagementTable:
    settings: RouterSettings = ctx.obj["settings"]
    return table_for(settings, side, redis_client(settings.redis), cell)  # type: ignore[arg-type]


def _tables(ctx: click.Context, side: str, cell: int | None) -> list[tuple[str, ManagementTable]]:
    """The tables of a side, each named: by its side, and with several cells '<side>/<cell>'."""
    settings: RouterSettings = ctx.obj["settings"]
    n = settings.topology.cells
    wanted = [cell] if cell is not None else list(cells.all_cells(settings))
    return [(side if n == 1 else f"{side}/{c}", _table(ctx, side, c)) for c in wanted]


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _fail(message: str, as_json: bool) -> NoReturn:
    if as_json:
        _emit({"error": message})
    raise click.ClickException(message)


def _plan_or_stop(plan: steer.Plan, yes: bool, as_json: bool) -> None:
    """Print the plan; without --yes, exit NOT_CONFIRMED having changed nothing."""
    if not as_json:
        click.echo(f"{plan.action} on the {plan.side} table ({plan.target}):")
        for line in plan.does:
            click.echo(f"  will: {line}")
        for line in plan.consequences:
            click.echo(f"  then: {line}")
        for line in plan.warnings:
            click.echo(f"  warning: {line}")
    if not yes:
        if as_json:
            _emit({"plan": plan.as_json(), "applied": False})
        click.echo("nothing changed: add --yes to do it", err=True)
        sys.exit(NOT_CONFIRMED)


def _steer(
    ctx: click.Context,
    side: str,
    plan: Any,
    as_json: bool,
    cell: int | None,
    destination: str | None = None,
    gid: str | None = None,
) -> tuple[ManagementTable, Any]:
    """The side's table (of `cell`; by default of the cell of `destination`, or the one
    holding group `gid`) and `plan(table)`, refusals reported."""
    settings: RouterSettings = ctx.obj["settings"]
    if settings.topology.cells == 1:
        cell = cell or 0
    if cell is None and destination is not None:
        cell = cells.cell_of_destination(settings, side, destination)  # type: ignore[arg-type]
    if cell is None and gid is not None:
        cell = next((c for c, t in enumerate(_tables(ctx, side, None)) if t[1].entry(gid)), 0)
    t = _table(ctx, side, cell or 0)
    try:
        return t, plan(t)
    except steer.SteerError as exc:
        _fail(str(exc), as_json)
