"""A librdkafka client left with no broker at all, told from its statistics (pure).

librdkafka 2.10 and later forget the brokers a Metadata response does not name. A single
KRaft broker fenced at the end of its controlled shutdown answers Metadata with no
broker for a few milliseconds, then closes its connections; when the client's broker
thread sees the close before its main thread handles that response, the client
decommissions its only broker and never re-bootstraps: no broker to ask, for good
(librdkafka#5301, still so in 2.16.0: docs/explanation/unit-loop.md). Its statistics then
name no broker (`brokers` holds only the logical coordinators, or nothing), which no
healthy client shows for longer than a re-bootstrap takes (the bootstrap servers are
added back at once).

`NoBrokerWatch` is fed each statistics document (`stats_cb`) and says when the client has
named no broker for `after_s` seconds, judged on the documents' own arrival times (a
client nobody polls is not called stuck for the time nobody looked). What to do then is
the owner's: the Sender fails its queue and starts a new producer
(`router.sender.delivery`), a unit retires its transactional producer
(`router.unit.commit.session`) and exits if its consumer is left so (`router.unit.source`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any


def known_brokers(stats: Mapping[str, Any]) -> int:
    """Brokers a statistics document names, the logical coordinators left out."""
    brokers = stats.get("brokers") or {}
    return sum(1 for b in brokers.values() if b.get("source") != "logical")


class NoBrokerWatch:
    """Whether a client's statistics have named no broker for `after_s` seconds (0: never)."""

    def __init__(self, after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.after_s = after_s
        self._clock = clock
        self._since: float | None = None  # first of the documents naming no broker in a row
        self._last: float | None = None  # the latest document's arrival
        self.documents = 0

    @property
    def interval_ms(self) -> int:
        """How often the client should send statistics: a third of `after_s`, 1 to 5 s."""
        return int(min(max(self.after_s * 1000 / 3, 1000), 5000))

    def seen(self, brokers: int) -> None:
        """A statistics document naming `brokers` brokers arrived now."""
        now = self._clock()
        self.documents += 1
        self._last = now
        if brokers > 0:
            self._since = None
        elif self._since is None:
            self._since = now

    def stats(self, raw: str) -> None:
        """A `stats_cb`: the document as librdkafka gives it (unreadable ones are ignored)."""
        try:
            doc = json.loads(raw)
        except ValueError:
            return
        if isinstance(doc, dict):
            self.seen(known_brokers(doc))

    def without_broker(self) -> float | None:
        """Seconds the documents have named no broker in a row; None if the last named one."""
        if self._since is None or self._last is None:
            return None
        return self._last - self._since

    def stuck(self) -> float | None:
        """Seconds without a broker, if at least `after_s`; else None."""
        gone = self.without_broker()
        return gone if self.after_s > 0 and gone is not None and gone >= self.after_s else None

    def reset(self) -> None:
        """A new client: nothing seen yet."""
        self._since = self._last = None


def watched(config: Mapping[str, Any], watch: NoBrokerWatch) -> dict[str, Any]:
    """`config` with statistics going to `watch` as well as to its own `stats_cb` (its
    `statistics.interval.ms` kept if set); unchanged if the watch is off."""
    if watch.after_s <= 0:
        return dict(config)
    own = config.get("stats_cb")

    def stats_cb(raw: str) -> None:
        watch.stats(raw)
        if own is not None:
            own(raw)

    interval = int(config.get("statistics.interval.ms") or 0) or watch.interval_ms
    return {**config, "statistics.interval.ms": interval, "stats_cb": stats_cb}
