"""Test-only fault injection: a unit kills itself with SIGKILL at a chosen point of its cycle.

Off unless the entry point passes a spec, which `router` reads from the environment
variable ROUTER_FAULTS, e.g. `after_produce=0.05,after_commit=0.02`: at each batch, with
that probability, the process SIGKILLs itself at that point (`p*n`: at most n times). The
chaos driver uses it to hit the windows that matter, which random kills from outside would
rarely hit:

  after_route     the table decided (entries created, leases taken), nothing produced
  after_produce   the batch is on the broker inside an open transaction, not committed
  after_commit    committed in Kafka, not settled in Redis (finals unreleased, lease held)
  before_route    the batch polled, the table not asked yet: the process FREEZES itself
                  (SIGSTOP, as a long GC pause would) instead of dying; whoever started it
                  sends SIGCONT, and it resumes as a zombie holding that batch
  in_assign       partitions assigned, the rebalance callback not run yet (nothing claimed
                  in the table): FREEZES likewise; resumed, the callback runs late
  before_produce  the table decided (leases taken), the records emitted, the leases not
                  checked and nothing produced: FREEZES likewise; resumed, the batch may
                  have outlived its leases (tests/integration/judge: the lease defects)
"""

from __future__ import annotations

import logging
import os
import random
import signal
from typing import Literal

from router.errors import ConfigError

log = logging.getLogger("router.faults")

Point = Literal[
    "after_route", "after_produce", "after_commit", "before_route", "in_assign", "before_produce"
]
POINTS: tuple[Point, ...] = (
    "after_route",
    "after_produce",
    "after_commit",
    "before_route",
    "in_assign",
    "before_produce",
)
# The points where the process kills itself; the others freeze it, for a test to resume it.
DYING: tuple[Point, ...] = ("after_route", "after_produce", "after_commit")


class Faults:
    def __init__(self, spec: str = "", seed: int | None = None) -> None:
        self.probability: dict[str, float] = {}
        self.left: dict[str, int] = {}  # points with a bound: hits left
        for item in filter(None, (part.strip() for part in spec.split(","))):
            point, _, value = item.partition("=")
            if point not in POINTS:
                raise ConfigError(f"unknown fault point {point!r}; one of {POINTS}")
            p, _, times = value.partition("*")
            self.probability[point] = float(p)
            if times:
                self.left[point] = int(times)
        self._random = random.Random(seed)

    def __bool__(self) -> bool:
        return bool(self.probability)

    def hit(self, point: Point) -> bool:
        p = self.probability.get(point)
        if p is None or self.left.get(point, 1) <= 0 or self._random.random() >= p:
            return False
        if point in self.left:
            self.left[point] -= 1
        return True

    @staticmethod
    def freeze(point: Point) -> None:
        log.warning("fault injection: SIGSTOP at %s", point)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
        log.warning("fault injection: resumed after SIGSTOP at %s", point)

    @staticmethod
    def die(point: Point) -> None:
        log.warning("fault injection: SIGKILL at %s", point)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
