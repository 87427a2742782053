"""Read every receive queue (read_committed) and turn what arrived into `Seen` records."""

from __future__ import annotations

import logging
import threading
import time

from router import schemas
from router.config import RouterSettings
from router.harness.verify import Seen
from router.harness.workload import ORDER_EVENT
from router.receiver import Receiver

log = logging.getLogger("router.collect")


def to_seen(queue: str, offset: int, payload: bytes | None) -> Seen | None:
    if payload is None:
        return None
    try:
        event = schemas.decode(ORDER_EVENT, payload)
    except Exception:
        return None
    latency = time.time() * 1000 - event["created_at"].timestamp() * 1000
    return Seen(
        queue,
        offset,
        event["event_id"],
        event["order_id"],
        event["line_no"],
        event["last_line"],
        latency,
    )


class Collector:
    """A background reader of all receive queues from the beginning."""

    def __init__(self, settings: RouterSettings, group_id: str) -> None:
        self.settings = settings
        self.group_id = group_id
        self.seen: list[Seen] = []
        self.undecodable = 0
        self.last_arrival = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def _run(self) -> None:
        receiver = Receiver(self.settings, group_id=self.group_id, assign=True)
        try:
            while not self._stop.is_set():
                m = receiver.poll(0.2)
                if m is None:
                    continue
                seen = to_seen(m.topic, m.offset, m.value)
                with self._lock:
                    if seen is None:
                        self.undecodable += 1
                    else:
                        self.seen.append(seen)
                    self.last_arrival = time.monotonic()
        finally:
            receiver.close()

    def wait_for(self, expected: int, timeout: float, quiet: float = 2.0) -> bool:
        """Until `expected` records arrived and nothing more came for `quiet` s (so that
        duplicates would show), or `timeout`. True if `expected` arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                n, last = len(self.seen), self.last_arrival
            if n >= expected and time.monotonic() - last >= quiet:
                return True
            self._stop.wait(0.1)
        return self.count() >= expected

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
