"""`router table ...`: inspect and steer the management tables, a thin click layer over
`router.table.steer`. Every command takes `--json` (one JSON document on stdout). Steering
commands (pin, drain, undrain, evict, release) print their plan and change nothing
without `--yes` (exit code 3); a refusal exits 1 with the reason."""

from __future__ import annotations

from typing import Any

import click

from router.backends.redis.client import redis_client
from router.cli.tables import (
    _ANY_SIDE,
    _CELL,
    _JSON,
    _SIDE,
    _YES,
    NOT_CONFIRMED,
    SIDES,
    _emit,
    _fail,
    _plan_or_stop,
    _steer,
    _tables,
)
from router.config.settings import RouterSettings
from router.state.store import find_group
from router.table import steer
from router.table import view as tableview

__all__ = ["NOT_CONFIRMED", "table"]


@click.group()
def table() -> None:
    """Inspect and steer the management tables in Redis."""


# ---------------------------------------------------------------------- reading


@table.command("list")
@_ANY_SIDE
@_CELL
@click.option("--destination", default=None, help="Only entries on this destination.")
@click.option("--state", type=click.Choice(tableview.STATES), default=None, help="Only this state.")
@click.option("--limit", default=50, show_default=True, help="At most this many entries (text).")
@_JSON
@click.pass_context
def table_list(
    ctx: click.Context,
    side: str | None,
    cell: int | None,
    destination: str | None,
    state: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Entries (guarantee ID -> destination, idle time, TTL, state), loads, draining
    destinations, counters and the waiting room, of one side or both."""
    out: dict[str, Any] = {}
    named = [(s, n) for s in ([side] if side else SIDES) for n in _tables(ctx, s, cell)]
    for s, (key, t) in named:
        views = tableview.entries(t, s, destination, state)
        if as_json:
            out[key] = {
                "entries": [v.as_json() for v in views],
                "load": t.loads(),
                "draining": sorted(t.draining()),
                "inflight": sorted({d for d, _ in t.inflight()}),
                "counters": t.stats(),
                "room": {"waiting": t.room(), "admitted": t.admitted()},
            }
        else:
            name = ctx.obj["settings"].topology.name
            name += "" if key == s else f" cell {key.rsplit('/', 1)[1]}"
            filtered = bool(destination or state)
            click.echo("\n".join(tableview.list_lines(t, s, name, views, limit, filtered)))
    if as_json:
        _emit(out)


@table.command("show")
@click.argument("guarantee_id")
@_ANY_SIDE
@_CELL
@_JSON
@click.pass_context
def table_show(
    ctx: click.Context, guarantee_id: str, side: str | None, cell: int | None, as_json: bool
) -> None:
    """One group end to end: a sender's record of it (lane, next seq as of its last
    checkpoint: docs/explanation/resume.md), its entry on each side (state, destination, lane, age,
    idle time, TTL, parked messages, waiting room) and receivers' statuses (last seq done,
    complete). The end records exist for clients with a sender ID or receiver state.
    Exit 1 if none of them has the group."""
    found = {
        key: tableview.show(t, s, guarantee_id)
        for s in ([side] if side else SIDES)
        for key, t in _tables(ctx, s, cell)
    }
    settings: RouterSettings = ctx.obj["settings"]
    client = redis_client(settings.redis)
    ends = find_group(client, guarantee_id, settings.redis.key_prefix)
    if as_json:
        out: dict[str, Any] = {s: None if v is None else v.as_json() for s, v in found.items()}
        out.update(tableview.ends_json(*ends))
        _emit(out)
    else:
        for key, v in found.items():
            click.echo("\n".join(tableview.show_lines(key, guarantee_id, v)))
        for line in tableview.ends_lines(*ends):
            click.echo(line)
    if not any(found.values()) and not any(ends):
        raise click.ClickException(f"no entry for {guarantee_id!r}")


# ---------------------------------------------------------------------- steering


@table.command("pin")
@_CELL
@click.argument("guarantee_id")
@click.argument("destination")
@_SIDE
@click.option("--ttl-ms", type=int, default=None, help="The entry's TTL (default: routing's).")
@_YES
@_JSON
@click.pass_context
def table_pin(
    ctx: click.Context,
    cell: int | None,
    guarantee_id: str,
    destination: str,
    side: str,
    ttl_ms: int | None,
    yes: bool,
    as_json: bool,
) -> None:
    """Pin a NEW group (no entry yet) to DESTINATION: its first message goes there."""
    ttl = ttl_ms or ctx.obj["settings"].routing.default_ttl_ms
    t, plan = _steer(
        ctx,
        side,
        lambda t: steer.plan_pin(t, side, guarantee_id, destination, ttl),
        as_json,
        cell,
        destination,
    )
    _plan_or_stop(plan, yes, as_json)
    try:
        steer.pin(t, side, guarantee_id, destination, ttl)
    except steer.SteerError as exc:
        _fail(str(exc), as_json)
    view = tableview.show(t, side, guarantee_id)
    if as_json:
        _emit({"plan": plan.as_json(), "applied": True, "entry": view and view.as_json()})
    else:
        click.echo(f"pinned: {guarantee_id!r} -> {destination}")


@table.command("drain")
@_CELL
@click.argument("destination")
@_SIDE
@click.option("--wait", is_flag=True, help="Then wait until no group is open there.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds --wait waits.")
@_YES
@_JSON
@click.pass_context
def table_drain(
    ctx: click.Context,
    cell: int | None,
    destination: str,
    side: str,
    wait: bool,
    timeout: float,
    yes: bool,
    as_json: bool,
) -> None:
    """Place no new group or ordinary message on DESTINATION (open groups finish there);
    reports the groups left, and with --wait waits for them (exit 1 at the timeout)."""
    t, plan = _steer(
        ctx, side, lambda t: steer.plan_drain(t, side, destination), as_json, cell, destination
    )
    _plan_or_stop(plan, yes, as_json)
    status = steer.drain(t, side, destination)
    if not as_json:
        click.echo(f"draining {destination}: {len(status.open_groups)} open group(s) left")

    def progress(s: steer.DrainStatus) -> None:
        click.echo(
            f"{destination}: {len(s.open_groups)} open group(s), {s.inflight} batch(es) in flight",
            err=as_json,
        )

    if wait:
        status = steer.wait_drained(t, side, destination, timeout, progress)
    if as_json:
        _emit({"plan": plan.as_json(), "applied": True, "status": status.as_json()})
    if wait and not status.idle:
        raise click.ClickException(
            f"{destination} still has {len(status.open_groups)} open group(s) after {timeout} s"
        )
    if wait and not as_json:
        click.echo(f"{destination} is drained: nothing open or in flight there")


@table.command("undrain")
@_CELL
@click.argument("destination")
@_SIDE
@_YES
@_JSON
@click.pass_context
def table_undrain(
    ctx: click.Context, cell: int | None, destination: str, side: str, yes: bool, as_json: bool
) -> None:
    """End the drain of DESTINATION."""
    t, plan = _steer(
        ctx, side, lambda t: steer.plan_undrain(t, side, destination), as_json, cell, destination
    )
    _plan_or_stop(plan, yes, as_json)
    was = steer.undrain(t, side, destination)
    if as_json:
        _emit({"plan": plan.as_json(), "applied": True, "was_draining": was})
    else:
        click.echo(f"{destination} takes new groups again" + ("" if was else " (was not draining)"))


@table.command("evict")
@_CELL
@click.argument("destination")
@_SIDE
@_YES
@_JSON
@click.pass_context
def table_evict(
    ctx: click.Context, cell: int | None, destination: str, side: str, yes: bool, as_json: bool
) -> None:
    """Remove every entry on DESTINATION (like `release` for each)."""
    t, plan = _steer(
        ctx, side, lambda t: steer.plan_evict(t, side, destination), as_json, cell, destination
    )
    _plan_or_stop(plan, yes, as_json)
    n = steer.evict(t, destination, plan.groups)
    if as_json:
        _emit({"plan": plan.as_json(), "applied": True, "released": n})
    else:
        click.echo(f"released: {n}")


@table.command("release")
@_CELL
@_SIDE
@click.argument("guarantee_id")
@_YES
@_JSON
@click.pass_context
def table_release(
    ctx: click.Context, cell: int | None, side: str, guarantee_id: str, yes: bool, as_json: bool
) -> None:
    """Remove one entry by hand (its destination becomes free; later messages of the
    group start a new assignment)."""
    t, plan = _steer(
        ctx,
        side,
        lambda t: steer.plan_release(t, side, guarantee_id),
        as_json,
        cell,
        gid=guarantee_id,
    )
    _plan_or_stop(plan, yes, as_json)
    n = steer.release(t, guarantee_id)
    if as_json:
        _emit({"plan": plan.as_json(), "applied": True, "released": n})
    else:
        click.echo(f"released: {n}")
