"""Assigned partitions whose fetcher never started (pure logic, no I/O): a guard against a
librdkafka defect that strands a partition for good.

After an assignment without explicit offsets librdkafka asks the group coordinator for the
committed offsets before it starts fetching. If that OffsetFetch fails as a whole (a
request-level error such as NOT_COORDINATOR, as right after a broker restart while the
coordinator moves or loads), librdkafka leaves the partition among those "being queried"
and never asks again: the partition stays assigned, its fetcher never starts, and its
backlog grows while the group believes it is consumed (librdkafka issue #5586, open in
2.16). A chaos run saw what that does, most likely from this defect (the unit ran without
librdkafka's debug log): a send unit held a partition for four minutes after the broker
restart and read nothing of it, so three groups whose later members sat there held all
three destinations and everything else waited.

With librdkafka's statistics turned on (`kafka.client_config` `statistics.interval.ms`,
for example 60000; off by default: with them every 5 s the bench's short priority stage
saw high-priority p99 latencies of 1.1-2.6 s in half its runs, against 0.1-0.5 s without),
the unit reads them: each partition's
`fetch_state` ("none" until its fetcher starts, "active" once it fetches, paused or not).
A partition assigned at least `after_s` ago, of which the unit consumed nothing since, and
whose fetcher the latest statistics (taken after `after_s` had passed) show not started,
is stranded; the unit assigns it again (`Source.reassign`), which queries its committed
offset afresh. Nothing of it was consumed since the assignment, so no batch holds its
records and nothing is skipped or read twice beyond what the committed offset says.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from router.unit.steps.batch import TP

log = logging.getLogger("router.unit")

STRANDED_AFTER_S = 20.0  # assigned this long, never started: assigned again
NOT_STARTED = frozenset({"none", "stopped"})


def fetch_states(stats_json: str) -> dict[TP, str]:
    """Each partition's `fetch_state` in one librdkafka statistics document (partition
    -1, the topic's internal placeholder, left out). A document that is not JSON: none."""
    try:
        doc = json.loads(stats_json)
    except ValueError:
        return {}
    out: dict[TP, str] = {}
    for topic, t in (doc.get("topics") or {}).items():
        for p, v in (t.get("partitions") or {}).items():
            if p != "-1" and isinstance(v, dict):
                out[(topic, int(p))] = str(v.get("fetch_state", ""))
    return out


@dataclass
class StallGuard:
    """When each partition was assigned and whether anything of it was consumed since;
    which are stranded (`stranded`)."""

    after_s: float = STRANDED_AFTER_S
    assigned_at: dict[TP, float] = field(default_factory=dict)
    unconsumed: set[TP] = field(default_factory=set)  # assigned, nothing consumed since
    states: dict[TP, str] = field(default_factory=dict)
    states_at: float | None = None  # time.monotonic() of the latest statistics

    def assigned(self, tps: Iterable[TP], now: float) -> None:
        for tp in tps:
            self.assigned_at[tp] = now
            self.unconsumed.add(tp)

    def revoked(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self.assigned_at.pop(tp, None)
            self.unconsumed.discard(tp)

    def took(self, tps: Iterable[TP]) -> None:
        """Partitions of which messages were consumed (the caller may skip this while
        `unconsumed` is empty: then it changes nothing)."""
        self.unconsumed.difference_update(tps)

    def statistics(self, states: Mapping[TP, str], now: float) -> None:
        self.states, self.states_at = dict(states), now

    def stranded(self, now: float) -> list[TP]:
        """Partitions assigned `after_s` ago or more, nothing consumed since, that the
        latest statistics (taken `after_s` or more after their assignment) show with no
        fetcher started. Each is reported once per assignment: `assigned` starts it over."""
        if self.states_at is None:
            return []
        out = []
        for tp in self.unconsumed:
            at = self.assigned_at[tp]
            if now - at < self.after_s or self.states_at - at < self.after_s:
                continue
            if self.states.get(tp) in NOT_STARTED:
                out.append(tp)
        return sorted(out)
