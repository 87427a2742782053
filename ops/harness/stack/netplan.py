"""The network faults of a chaos run, planned (pure: no proxy, no clock): which kind, on
which unit's link, when and for how long. `ops.harness.stack.netlinks` applies them.

Kinds, each on ONE unit's own proxy (the others keep their links):

* ``redis-cut``: nothing passes between the unit and Redis (both directions, connections
  held open) for longer than its leases (15 s), then it heals (the held connections are
  closed, the unit reconnects).
* ``kafka-cut``: the same between the unit and the broker, past its consumer session (10 s):
  the group takes its partitions away, Kafka fences its transaction.
* ``redis-slow`` / ``kafka-slow``: every answer delayed by 100-500 ms (a latency of
  300 ms, jitter 200 ms) for a while.
* ``redis-reset`` / ``kafka-reset``: every connection reset (TCP RST) at its next byte, for
  about a second: connections dropped mid-script, mid-request.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Server = Literal["redis", "kafka"]

KINDS = ("redis-cut", "kafka-cut", "redis-slow", "kafka-slow", "redis-reset", "kafka-reset")
SLOW_LATENCY_MS = 300  # +- SLOW_JITTER_MS: 100-500 ms
SLOW_JITTER_MS = 200
RESET_HOLD_S = 1.0


@dataclass(frozen=True)
class NetFault:
    at_s: float  # since the run's start
    kind: str  # one of KINDS
    slot: str  # the unit link it hits (ops.harness.stack.netlinks)
    hold_s: float  # how long until it heals

    @property
    def server(self) -> Server:
        return "redis" if self.kind.startswith("redis") else "kafka"

    @property
    def effect(self) -> str:
        return self.kind.split("-", 1)[1]  # cut, slow or reset

    def describe(self) -> str:
        what = {
            "cut": f"cut off from {self.server} for {self.hold_s:.0f} s",
            "slow": f"{self.server} slowed by {SLOW_LATENCY_MS - SLOW_JITTER_MS}-"
            f"{SLOW_LATENCY_MS + SLOW_JITTER_MS} ms for {self.hold_s:.0f} s",
            "reset": f"{self.server} connections reset for {self.hold_s:.0f} s",
        }[self.effect]
        return f"{self.slot} {what}"


def plan(
    rng: random.Random,
    count: int,
    duration_s: float,
    slots: Sequence[str],
    kinds: Sequence[str] = KINDS,
    cut_s: float = 20.0,
    slow_s: float = 10.0,
) -> list[NetFault]:
    """`count` faults spread over the sending time (10 % to 80 % of `duration_s`), the
    kinds in turn (every kind once if `count` >= len(kinds)), each on a slot chosen at
    random. Two faults never overlap on one slot: a fault whose slot is still hit is moved
    to the next free slot, or after the fault that holds it."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown network fault kinds {sorted(unknown)}; known: {KINDS}")
    if count and not slots:
        raise ValueError("network faults need unit links (slots)")
    holds = {"cut": cut_s, "slow": slow_s, "reset": RESET_HOLD_S}
    busy_until = dict.fromkeys(slots, 0.0)
    out: list[NetFault] = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        at = duration_s * (0.1 + 0.7 * (i + rng.random()) / count)
        hold = holds[kind.split("-", 1)[1]]
        first = rng.choice(list(slots))
        order = [first, *(s for s in slots if s != first)]
        slot = next((s for s in order if busy_until[s] <= at), None)
        if slot is None:
            slot = min(order, key=lambda s: busy_until[s])
            at = busy_until[slot]
        busy_until[slot] = at + hold
        out.append(NetFault(at, kind, slot, hold))
    return sorted(out, key=lambda f: f.at_s)
