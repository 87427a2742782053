"""What a chaos run found (`ChaosResult`: the verdict, the unit deaths and server restarts,
the exits that were neither), and its summary as the driver prints it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ops.harness.console import Row, SummaryItem, summary_lines
from ops.harness.scenarios.demo_run import interleaving_rows
from ops.harness.verdict.rest import RestReport
from ops.harness.verdict.verify import Report


@dataclass
class ChaosResult:
    report: Report
    deaths: Counter[str] = field(default_factory=Counter)  # cause -> count
    restarts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    sender_failures: list[str] = field(default_factory=list)
    undecodable: int = 0
    crashes: list[str] = field(default_factory=list)  # exits that were not kills
    shared: dict[str, int] = field(default_factory=dict)  # router counters: explanation
    policy: str = "share"
    pauses: int = 0  # unit processes SIGSTOPped, then SIGCONTed (zombies)
    net_faults: Counter[str] = field(default_factory=Counter)  # kind -> healed faults
    # Every fault kind the run asked for: (requested, happened); one that never happened
    # fails the run (the run did not prove what it was asked to)
    faults: dict[str, tuple[int, int]] = field(default_factory=dict)
    # both sides' tables once every unit stopped (ops.harness.verdict.rest); empty: not read
    rest: list[RestReport] = field(default_factory=list)
    remembered: dict[str, int] = field(default_factory=dict)  # (router counters) per side

    @property
    def kills(self) -> int:
        return sum(self.deaths.values())

    def violations(self) -> list[str]:
        """Broken guarantees (disallowed interleavings on either side included) and unit
        exits that were neither our kills nor armed fault injections."""
        out = self.report.violations()
        if self.policy == "wait":
            out += [
                f"{s.side} side: {s.interleaved} interleaved under policy wait"
                for s in self.report.sides
                if s.interleaved
            ]
        if self.sender_failures:
            out.append(f"sender failures={len(self.sender_failures)}")
        if self.undecodable:
            out.append(f"undecodable={self.undecodable}")
        if self.crashes:
            out.append(f"unexpected unit exits={len(self.crashes)}")
        out += [
            f"fault kind {kind} requested {asked}, happened 0"
            for kind, (asked, done) in self.faults.items()
            if asked and not done
        ]
        return out


SUMMARY_WIDTH = 21  # the label column of the chaos summary


def summary(result: ChaosResult) -> list[str]:
    """The summary as plain lines (what CI logs and the tests read)."""
    return summary_lines(summary_rows(result), SUMMARY_WIDTH)


def summary_rows(result: ChaosResult) -> list[SummaryItem]:
    r = result.report
    items: list[SummaryItem] = [
        "Chaos summary",
        Row(
            "sent",
            f"{r.sent}",
            "(acknowledged by Kafka" + ("; a multicast copy each)" if r.multicast_sent else ")"),
        ),
        Row("received", f"{r.received}", "(read_committed, read again from the start)"),
        Row("groups", f"{r.groups_sent}", f"complete, in order, on one queue: {r.groups_complete}"),
        Row("lost", f"{r.lost}"),
        Row("duplicated", f"{r.duplicated}"),
        Row("reordered", f"{r.reordered}"),
        Row("split groups", f"{r.split_groups}"),
        *qos_rows(r),
        *interleaving_rows(r, result.shared),
        Row(
            "remembered (router)",
            f"send {result.remembered.get('send', 0)}, "
            f"receive {result.remembered.get('receive', 0)}",
            "(members decided from the units' memory of their groups; router counters)",
            width=22,
        ),
        Row(
            "unit deaths",
            f"{result.kills}",
            ", ".join(f"{k}: {v}" for k, v in sorted(result.deaths.items())),
        ),
        Row("unit pauses", f"{result.pauses}", "SIGSTOP past the session and leases, SIGCONT"),
        Row(
            "network faults",
            f"{sum(result.net_faults.values())}",
            ", ".join(f"{k}: {v}" for k, v in sorted(result.net_faults.items()))
            or "(one unit's link to Redis or the broker: cut, slowed, reset)",
        ),
        Row(
            "server restarts",
            f"broker {result.restarts.get('kafka', 0)}, Redis {result.restarts.get('redis', 0)}",
        ),
        Row("duration", f"{result.seconds:>9.1f} s"),
    ]
    if result.rest:
        items.insert(
            -1,
            Row(
                "tables at rest",
                "clean" if all(x.clean for x in result.rest) else "NOT CLEAN",
                "; ".join(x.line() for x in result.rest),
            ),
        )
    if result.faults:
        items.insert(
            -1,
            Row(
                "fault kinds",
                f"{sum(1 for _, done in result.faults.values() if done)} of "
                f"{sum(1 for asked, _ in result.faults.values() if asked)}",
                ", ".join(
                    f"{kind}: {done}" + (f" of {asked}" if asked != done else "")
                    for kind, (asked, done) in result.faults.items()
                    if asked or done
                ),
            ),
        )
    if r.lost:
        items.append(f"    lost, for example: {', '.join(r.lost_examples)}")
    if r.duplicated:
        items.append("    duplicated, for example:")
        items.extend(f"      {d}" for d in r.duplicate_examples)
    if result.sender_failures:
        items.append(f"    sender failures ({len(result.sender_failures)}), for example:")
        items.extend(f"      {f[:600]}" for f in result.sender_failures[:5])
    if result.crashes:
        items.append(Row("unexpected exits", f"{len(result.crashes)} (see below)"))
        items.extend("    " + c.replace("\n", "\n    ") for c in result.crashes[:3])
    if r.accounts is not None and r.accounts.examples:
        items.extend(f"    {e}" for e in r.accounts.examples)
    if r.bands is not None:
        items.extend(f"    {e}" for e in r.bands.examples)
    if r.features is not None:
        items.extend(f"    {e}" for e in r.features.examples)
    items.extend(f"    {e}" for x in result.rest for e in x.examples)
    if result.policy == "wait":  # none is allowed: where, for a diagnosis
        for s in (r.send, r.receive):
            if s is not None and s.inside:
                items.append(f"    interleaved on the {s.side} side, the first:")
                items.extend(f"      {e}" for e in s.inside)
    v = result.violations()
    items.append(
        "RESULT: "
        + (
            "PASS - nothing lost, duplicated, reordered or split; no disallowed interleaving; "
            "every message delivered, expired or dead-lettered once"
            if not v
            else "FAIL - " + "; ".join(v)
        )
    )
    return items


def qos_rows(r: Report) -> list[SummaryItem]:
    """Multicast, lifetimes and priorities: what the queues and the events topic hold."""
    rows: list[SummaryItem] = []
    if r.multicast_sent:
        rows.append(
            Row(
                "multicast",
                f"{r.multicast_sent}",
                f"messages, {r.multicast_copies} copies expected; lost and duplicated "
                "copies are counted above",
            )
        )
    a = r.accounts
    if a is not None:
        rows.append(Row("with a lifetime", f"{a.expiring_sent}", a.accounted()))
        rows.append(
            Row(
                "expired",
                f"{a.expired}",
                f"twice {a.expired_twice}, also delivered {a.expired_and_delivered}, "
                f"without a lifetime {a.expired_unexpected}, early {a.expired_early}",
            )
        )
        rows.append(Row("dead-lettered", f"{a.dead_lettered}", _reasons(a.dead_reasons)))
    if r.bands is not None:
        rows += [Row(*row) for row in r.bands.rows()]
    if r.features is not None:
        rows += [Row(*row) for row in r.features.rows()]
    return rows


def _reasons(reasons: Counter[str]) -> str:
    return ", ".join(f"{k}: {n}" for k, n in sorted(reasons.items()))
