"""What the live status page (`router console`) shows, built by pure functions from one
refresh's reads (`router.console.snapshot`) and the console's history
(`router.console.history`): no I/O here, so it is tested without servers.

`status()` returns one JSON-ready document (`/api/status`): per side, the cards at the top
(`router.console.figures`: counts, each with its plot), then each destination with its
groups, the groups not on a destination, the waiting room's queue and the admitted,
staged, stopped and closing groups, every list capped and searchable by guarantee ID
(`router.console.paging`), the draining destinations and the table's counters; then
dead-letter and expiry totals, and per role the live processes and their throughput
(with its plot).
"""

from __future__ import annotations

from typing import Any

from router.console import figures
from router.console.history import History
from router.console.paging import FIRST_PAGE, Query, capped, caption
from router.console.snapshot import (
    DEAD_LETTER_COUNTERS,
    EXPIRY_COUNTERS,
    NO_DESTINATION,
    RATE_COUNTERS,
    Rates,
    Sample,
    SideSnapshot,
    role_of,
)
from router.table import room
from router.table.view import EntryView


def _group(v: EntryView) -> dict[str, Any]:
    return {
        "guarantee_id": v.guarantee_id,
        "state": v.state,
        "age_s": round(v.age_s, 1),
        "idle_s": round(v.idle_s, 1),
        "expires_in_s": round(v.expires_in_s, 1),
        "parks": v.parks,
        "lane": v.lane,
    }


def label(gid: str) -> str:
    """A room member as the page names it: a lane's ordinary messages, a queue's multicast
    copies, or a group's guarantee ID."""
    target = room.copy_target(gid)
    if target is not None:
        return f"(multicast copies for {target})"
    return f"(ordinary of {gid[1:]})" if room.is_pseudo(gid) else gid


def _oldest_first(vs: list[EntryView]) -> list[EntryView]:
    return sorted(vs, key=lambda v: (-v.age_s, v.guarantee_id))


def _groups(vs: list[EntryView], what: str, q: Query) -> dict[str, Any]:
    page = capped(_oldest_first(vs), lambda v: v.guarantee_id, q)
    page["caption"] = caption(what, page, "oldest", q.search)
    page["items"] = [_group(v) for v in page["items"]]
    return page


def _ids(gids: list[str], what: str, q: Query, order: str = "first") -> dict[str, Any]:
    page = capped(gids, lambda g: g, q)
    page["caption"] = caption(what, page, order, q.search)
    return page


def side_status(snap: SideSnapshot, q: Query = FIRST_PAGE) -> dict[str, Any]:
    """One side's lists: destinations (in the side's order, then any unknown one an entry
    names) with their groups oldest first, and the groups by state, each capped."""
    by_dest: dict[str, list[EntryView]] = {d: [] for d in snap.destinations}
    unplaced: list[EntryView] = []
    for v in snap.entries:
        if v.destination == NO_DESTINATION:
            unplaced.append(v)
        else:
            by_dest.setdefault(v.destination, []).append(v)
    draining = set(snap.draining)
    destinations = [
        {"name": d, "draining": d in draining, "groups": _groups(vs, "open groups", q)}
        for d, vs in by_dest.items()
    ]
    waits = dict(zip(snap.room, figures.waits_s(snap), strict=True))
    waiting = _ids(list(snap.room), "waiting", q, "oldest")
    waiting["items"] = [
        {"guarantee_id": g, "label": label(g), "waiting_s": round(waits[g], 1)}
        for g in waiting["items"]
    ]
    if waits:
        oldest = figures.seconds(max(waits.values()))
        waiting["caption"] = waiting["caption"].replace(";", f"; oldest {oldest};", 1)

    def ids(state: str) -> list[str]:
        return sorted(v.guarantee_id for v in snap.entries if v.state == state)

    admitted = _ids(sorted(snap.admitted), "admitted", q)
    admitted["items"] = [{"guarantee_id": g, "destination": snap.admitted[g]}
                         for g in admitted["items"]]  # fmt: skip
    return {
        "destinations": destinations,
        "unplaced": _groups(unplaced, "without a destination", q),
        "open_groups": sum(1 for v in snap.entries if v.destination != NO_DESTINATION),
        "waiting": waiting,
        "admitted": admitted,
        "staged": _ids(ids("staged"), "staged", q),
        "stopped": _ids(ids("stopped"), "stopped", q),
        "closing": _ids(ids("closing"), "closing", q),
        "draining": sorted(draining),
        "counters": dict(sorted(snap.counters.items())),
    }


def roles(cur: Sample, throughput: Rates) -> dict[str, Any]:
    """Per role: live processes, their summed counters that matter here, and throughput."""
    out: dict[str, Any] = {}
    for role in sorted({role_of(p) for p in cur.counters}):
        procs = [c for p, c in cur.counters.items() if role_of(p) == role]
        keep = (*RATE_COUNTERS, *DEAD_LETTER_COUNTERS, *EXPIRY_COUNTERS, "source_lag")
        totals = {n: sum(c.get(n, 0) for c in procs) for n in keep}
        out[role] = {
            "processes": len(procs),
            "totals": {n: v for n, v in totals.items() if v},
            "per_s": throughput.get(role, {}),
        }
    return out


def status(
    topology: str,
    sides: list[SideSnapshot],
    cur: Sample,
    throughput: Rates,
    history: History,
    now: float,
    q: Query = FIRST_PAGE,
    errors: list[str] | None = None,
) -> dict[str, Any]:
    """The whole page's data (`/api/status`); `history` holds this refresh's point already
    (`figures.point`), `now` its time."""
    procs = cur.counters.values()
    doc_sides = {}
    for s in sides:
        values = figures.side_values(s, cur, throughput)
        doc_sides[s.side] = {
            "cards": figures.side_cards(s, values, history, now),
            **side_status(s, q),
        }
    by_role = roles(cur, throughput)
    return {
        "topology": topology,
        "search": q.search,
        "limit": q.limit,
        "sides": doc_sides,
        "dead_letters": {n: sum(c.get(n, 0) for c in procs) for n in DEAD_LETTER_COUNTERS},
        "expiries": {
            "table_swept": sum(s.counters.get("swept", 0) for s in sides),
            **{n: sum(c.get(n, 0) for c in procs) for n in EXPIRY_COUNTERS},
        },
        "roles": by_role,
        "role_lines": figures.role_lines(by_role, history, now),
        "errors": list(errors or []),
    }
