"""The router's events written registry-framed (registry.frame_events): their schemas are
registered when a unit or the sweeper starts, waiting for a registry that is away."""

from __future__ import annotations

import logging
import random
import threading

from router.backends.registry.client import RegistryClient, RegistryUnavailable
from router.config.registry import RegistrySettings
from router.contract import events

log = logging.getLogger("router.registry")


def frame_events_at_start(settings: RegistrySettings, stop: threading.Event, role: str) -> bool:
    """If `settings.frame_events`: register the event schemas (`events.use_registry`),
    retrying with a growing pause while the registry is away, until done or `stop` is set.
    False only if stopped first. A registry that refuses a schema (RegistryError: say, an
    incompatible earlier version under the same subject) is a configuration error: raised."""
    if not settings.frame_events:
        return True
    client = RegistryClient(settings)
    pause = 0.2
    while not stop.is_set():
        try:
            ids = events.use_registry(client)
        except RegistryUnavailable as exc:
            log.warning(
                "%s: cannot register the event schemas yet, retrying in %.1f s: %s",
                role, pause, exc,
            )  # fmt: skip
            # a retry's back-off, not synchronisation; jittered, so that processes started
            # together do not collide again on the same subjects
            stop.wait(pause * random.uniform(0.5, 1.5))
            pause = min(pause * 2, 5.0)
            continue
        log.info("%s: events are registry-framed (schema IDs %s)", role, ids)
        return True
    return False
