"""Every message accounted for (pure logic, no I/O): in = delivered + expired + dead-lettered.

A message with a lifetime (`Sent.expires`) may be delivered (it reached its receive queue
in time) or expired (an ExpiredMessage event names it), never both and never neither; a
message without one must be delivered. The events are identified by the workload's own
`event-id` header (an ExpiredMessage keeps the original headers, not the payload); dead
letters by their payload. Judged from what the events and dead-letter topics hold, never
from the router's counters:

* expired twice: more than one event for one message (the units write it in the
  transaction that commits its offset: exactly once; only the receiver library's hop is
  at least once, and the chaos run has no receiver library in its path);
* expired and delivered: an event for a message also found on a receive queue;
* expired unexpected: an event for a message sent without a lifetime, or never sent;
* expired early: an event whose `expired_at` is before the message's instant;
* dead-lettered: the workload sends no bad input, so any dead letter of it is reported
  (it is accounted for, not lost, but it is a violation of the run).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

EVENT_ID_HEADER = "event-id"  # the workload's own header on messages with a lifetime


@dataclass(frozen=True, slots=True)
class ExpiredSeen:
    """One ExpiredMessage event, as the events topic holds it."""

    event_id: str | None  # the message's `event-id` header (None: it had none)
    hop: str  # SEND_UNIT, RECEIVE_UNIT, RECEIVER
    source: str  # topic[partition]@offset where the hop read it
    expires_ms: int | None
    expired_ms: int


@dataclass(frozen=True, slots=True)
class LetterSeen:
    """One dead letter of the workload (identified by its payload)."""

    event_id: str | None
    reason: str


@dataclass
class Accounts:
    expiring_sent: int = 0  # messages sent with a lifetime
    expiring_delivered: int = 0  # ... found on a receive queue
    expired: int = 0  # messages with at least one ExpiredMessage event
    expired_by_hop: Counter[str] = field(default_factory=Counter)
    expired_twice: int = 0
    expired_and_delivered: int = 0
    expired_unexpected: int = 0
    expired_early: int = 0
    dead_lettered: int = 0
    dead_reasons: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        out = []
        for name in (
            "expired_twice",
            "expired_and_delivered",
            "expired_unexpected",
            "expired_early",
            "dead_lettered",
        ):
            if getattr(self, name):
                out.append(f"{name}={getattr(self, name)}")
        return out

    def accounted(self) -> str:
        """One line: what became of the messages with a lifetime."""
        hops = ", ".join(f"{h.lower()} {n}" for h, n in sorted(self.expired_by_hop.items()))
        return (
            f"delivered {self.expiring_delivered}, expired {self.expired}"
            + (f" ({hops})" if hops else "")
            + f", dead-lettered {self.dead_lettered}"
        )


def account(
    expiring: Mapping[str, bool],
    delivered: Collection[str],
    expired: Iterable[ExpiredSeen],
    dead: Iterable[LetterSeen],
) -> tuple[Accounts, set[str]]:
    """(the accounts, the event IDs accounted for by an event or a dead letter).
    `expiring`: every event ID sent -> whether it had a lifetime; `delivered`: the event
    IDs found on the receive queues (first copies)."""
    a = Accounts(expiring_sent=sum(1 for e in expiring.values() if e))
    a.expiring_delivered = sum(1 for e, life in expiring.items() if life and e in delivered)
    events: dict[str, list[ExpiredSeen]] = {}
    for x in expired:
        key = x.event_id if x.event_id is not None else f"?{x.source}"
        events.setdefault(key, []).append(x)
    for event_id, found in sorted(events.items()):
        a.expired_twice += len(found) - 1
        if len(found) > 1:
            _example(a, f"{event_id}: {len(found)} events ({', '.join(x.source for x in found)})")
        if not expiring.get(event_id, False):
            a.expired_unexpected += 1
            _example(a, f"{event_id}: expired, but sent without a lifetime (or never)")
            continue
        a.expired += 1
        a.expired_by_hop[found[0].hop] += 1
        if event_id in delivered:
            a.expired_and_delivered += 1
            _example(a, f"{event_id}: both delivered and expired at {found[0].hop}")
        early = [x for x in found if x.expires_ms is not None and x.expired_ms < x.expires_ms]
        if early:
            a.expired_early += 1
            x = early[0]
            _example(a, f"{event_id}: expired at {x.expired_ms}, its instant {x.expires_ms}")
    lettered: set[str] = set()
    for d in dead:
        a.dead_lettered += 1
        a.dead_reasons[d.reason] += 1
        if d.event_id is not None:
            lettered.add(d.event_id)
        _example(a, f"{d.event_id}: dead-lettered ({d.reason})")
    return a, (set(events) & set(expiring)) | lettered


def _example(a: Accounts, what: str) -> None:
    if len(a.examples) < 5:
        a.examples.append(what)
