"""Test-only fault injection: a unit kills itself with SIGKILL at a chosen point of its cycle.

Off unless the entry point passes a spec, which `router` reads from the environment
variable ROUTER_FAULTS, e.g. `after_produce=0.05,after_commit=0.02`: at each batch, with
that probability, the process SIGKILLs itself at that point. The chaos driver uses it to
hit the windows that matter, which random kills from outside would rarely hit:

  after_route     the table decided (entries created, leases taken), nothing produced
  after_produce   the batch is on the broker inside an open transaction, not committed
  after_commit    committed in Kafka, not settled in Redis (finals unreleased, lease held)
"""

from __future__ import annotations

import logging
import os
import random
import signal
from typing import Literal

from router.errors import ConfigError

log = logging.getLogger("router.faults")

Point = Literal["after_route", "after_produce", "after_commit"]
POINTS: tuple[Point, ...] = ("after_route", "after_produce", "after_commit")


class Faults:
    def __init__(self, spec: str = "", seed: int | None = None) -> None:
        self.probability: dict[str, float] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            point, _, value = item.partition("=")
            if point not in POINTS:
                raise ConfigError(f"unknown fault point {point!r}; one of {POINTS}")
            self.probability[point] = float(value)
        self._random = random.Random(seed)

    def __bool__(self) -> bool:
        return bool(self.probability)

    def hit(self, point: Point) -> bool:
        p = self.probability.get(point)
        return p is not None and self._random.random() < p

    @staticmethod
    def die(point: Point) -> None:
        log.warning("fault injection: SIGKILL at %s", point)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
