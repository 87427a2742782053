"""The figures at the top of each side of the console, and their plots over time: open
groups, groups waiting and the oldest wait (with the wait-time percentiles of the groups
waiting now), groups staged, dead letters and expiries in the last minutes, throughput and
consumer lag. Built from what one refresh reads (`SideSnapshot`, the processes' published
counters and `source_lag`) and the console's `History`. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.console.history import WINDOW_S, History, Values, percentile
from router.console.snapshot import (
    DEAD_LETTER_COUNTERS,
    NO_DESTINATION,
    Rates,
    Sample,
    SideSnapshot,
    role_of,
)

SIDE_EXPIRY_COUNTERS = ("expired",)  # the side's processes'; the table adds swept, wait_timeouts
TABLE_EXPIRIES = ("swept", "wait_timeouts")


def side_of(role: str) -> str | None:
    """The side a process role works on ("send-unit", "send-relay": send); None for the
    sweeper, which works on both."""
    side = role.split("-", 1)[0]
    return side if side in ("send", "receive") and "-" in role else None


def waits_s(snap: SideSnapshot) -> list[float]:
    """Seconds each group in the side's room has waited, on the Redis clock."""
    return [max(0.0, (snap.now_ms - since) / 1000) for since in snap.room.values()]


def side_values(snap: SideSnapshot, cur: Sample, throughput: Rates) -> Values:
    """One side's figures at one refresh (cumulative counts for dead letters and expiries)."""
    procs = [c for p, c in cur.counters.items() if side_of(role_of(p)) == snap.side]
    waits = waits_s(snap)
    unit = throughput.get(f"{snap.side}-unit", {})
    lags = [c["source_lag"] for c in procs if "source_lag" in c]
    staged = sum(1 for v in snap.entries if v.state == "staged")
    return {
        "open": float(sum(1 for v in snap.entries if v.destination != NO_DESTINATION)),
        "waiting": float(len(snap.room)),
        "admitted": float(len(snap.admitted)),
        "oldest": max(waits) if waits else 0.0,
        "p50": percentile(waits, 50),
        "p90": percentile(waits, 90),
        "staged": float(staged),
        "dead_letters": float(sum(c.get(n, 0) for c in procs for n in DEAD_LETTER_COUNTERS)),
        "expiries": float(
            sum(snap.counters.get(n, 0) for n in TABLE_EXPIRIES)
            + sum(c.get(n, 0) for c in procs for n in SIDE_EXPIRY_COUNTERS)
        ),
        "in": unit.get("messages_in"),
        "out": unit.get("messages_out"),
        "lag": float(sum(lags)) if lags else None,
    }


def point(sides: list[SideSnapshot], cur: Sample, throughput: Rates) -> Values:
    """Everything one refresh adds to the history: "<side>.<figure>", "role.<role>.in|out"."""
    out: Values = {}
    for snap in sides:
        for name, value in side_values(snap, cur, throughput).items():
            out[f"{snap.side}.{name}"] = value
    for role, per in throughput.items():
        out[f"role.{role}.in"] = per.get("messages_in")
        out[f"role.{role}.out"] = per.get("messages_out")
    return out


def number(v: float | None, digits: int = 0) -> str:
    """A figure as the page prints it: thousands separated; an en dash if unknown."""
    if v is None:
        return "\u2013"
    return f"{v:,.{digits}f}"


def seconds(v: float | None) -> str:
    if v is None:
        return "\u2013"
    return f"{v:.1f} s" if v < 10 else f"{v:,.0f} s"


def _window(history: History, now: float) -> str:
    span = min(history.span(now), WINDOW_S)
    return f"last {WINDOW_S / 60:.0f} min" if span >= WINDOW_S - 1 else f"last {span:.0f} s"


def side_cards(
    snap: SideSnapshot, values: Values, history: History, now: float
) -> list[dict[str, Any]]:
    """The side's cards, each {id, label, text, value, detail, lines: {name: points}}."""
    side = snap.side

    def lines(*names: str) -> dict[str, list[list[float]]]:
        found = history.series([f"{side}.{n}" for n in names], now)
        return {n: found[f"{side}.{n}"] for n in names}

    def card(
        cid: str, label: str, value: float | None, text: str, detail: str, *names: str
    ) -> dict[str, Any]:
        return {"id": cid, "label": label, "value": value, "text": text, "detail": detail,
                "lines": lines(*names)}  # fmt: skip

    loads: dict[str, int] = {d: 0 for d in snap.destinations}
    for e in snap.entries:
        if e.destination != NO_DESTINATION:
            loads[e.destination] = loads.get(e.destination, 0) + 1
    window = _window(history, now)

    def recent(cid: str, label: str) -> dict[str, Any]:
        rise = history.increase(f"{side}.{cid}", now)
        detail = f"{window}; {number(values.get(cid))} in all"
        return card(cid, label, rise, number(rise), detail, cid)

    v = values
    return [
        card("open", "open groups", v["open"], number(v["open"]),
             ", ".join(f"{d}: {n:,}" for d, n in loads.items()) or "no destination", "open"),
        card("waiting", "waiting", v["waiting"], number(v["waiting"]),
             f"{number(v['admitted'])} admitted (draining)", "waiting"),
        card("oldest", "oldest wait", v["oldest"], seconds(v["oldest"]),
             f"p50 {seconds(v['p50'])}, p90 {seconds(v['p90'])}", "oldest", "p90", "p50"),
        card("staged", "staged", v["staged"], number(v["staged"]),
             "whole groups until their final", "staged"),
        recent("dead_letters", "dead letters"),
        recent("expiries", "expiries"),
        card("throughput", "throughput", v["out"], f"{number(v['out'], 1)}/s",
             f"{side}-unit: in {number(v['in'], 1)}/s, out {number(v['out'], 1)}/s", "in", "out"),
        card("lag", "consumer lag", v["lag"], number(v["lag"]), "records behind, all sources",
             "lag"),
    ]  # fmt: skip


def role_lines(roles: Mapping[str, Any], history: History, now: float) -> dict[str, Any]:
    """Per role, its throughput's points: {role: {"in": points, "out": points}}."""
    out: dict[str, Any] = {}
    for role in roles:
        found = history.series([f"role.{role}.in", f"role.{role}.out"], now)
        out[role] = {"in": found[f"role.{role}.in"], "out": found[f"role.{role}.out"]}
    return out
