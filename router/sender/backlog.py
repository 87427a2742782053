"""The sender's view of the send queues' backlog, and its choice of partition for a new
group or an ordinary message.

Backlog = high watermark - the send units' committed offset, read with one admin request
per refresh (every `refresh_s`, `router.backends.kafka.endoffsets`: a failed request makes its admin
client again), plus what this sender produced since. A refresh that
fails (a leader away) keeps the estimates and backs off, doubling up to `MAX_BACKOFF_S`:
the measure runs on the send path, and librdkafka's admin ListOffsets busy-polls while a
leader it asked is down (about one core for the request's duration, measured on the
three-broker cluster with a broker SIGKILLed), so each attempt is also bounded by
`REQUEST_TIMEOUT_S`. Backlogs within
`slack` messages of the least count as equal, and among equals a new group goes where
this sender's previous group went: one sender's consecutive groups then sit in one
partition and are consumed in the order sent, instead of being opened at once from
several partitions consumed at different paces (which would make them hold several
destinations at the same time).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaException, TopicPartition

from router.backends.kafka.offsets import CommittedOffsets
from router.utils.clock import Every

log = logging.getLogger("router.sender")

TP = tuple[str, int]

REQUEST_TIMEOUT_S = 2.0  # one measure's admin request and committed-offsets read
MAX_BACKOFF_S = 30.0  # between refresh attempts while they fail


class Backlog:
    """Estimated unconsumed messages per send-queue partition, and the least of them."""

    def __init__(
        self,
        ends: Callable[[Iterable[TP]], dict[TP, int]],
        committed: CommittedOffsets,
        units_group: str,
        partitions: list[TP],
        *,
        refresh_s: float,
        slack: int,
    ) -> None:
        self._ends = ends  # an EndOffsets(committed=False): the high watermarks
        self._committed = committed
        self._units_group = units_group
        self.partitions = partitions
        self._estimate: dict[TP, int] = dict.fromkeys(partitions, 0)
        self._refresh = Every(refresh_s)
        self._refresh_s = refresh_s
        self._slack = slack
        self._last_group_tp: TP | None = None
        self.ends: dict[TP, int] = {}  # high watermarks as last measured

    def end_bound(self, tp: TP) -> int:
        """An offset no record produced from now on can be below: `tp`'s high watermark
        as last measured (0 if never measured)."""
        return self.ends.get(tp, 0)

    def current(self) -> dict[TP, int]:
        """The estimate, measured again if `refresh_s` has passed."""
        if self._refresh.due():
            try:
                self._estimate = self._measure()
                self._refresh.interval = self._refresh_s
            except (KafkaException, TimeoutError) as exc:
                self._refresh.interval = min(
                    max(self._refresh.interval * 2, self._refresh_s), MAX_BACKOFF_S
                )
                log.warning(
                    "could not refresh send-queue backlog, keeping estimates (next try in"
                    " %.0f s): %s",
                    self._refresh.interval,
                    exc,
                )
        return self._estimate

    def _measure(self) -> dict[TP, int]:
        ends = self._ends(self.partitions)
        missing = [tp for tp in self.partitions if tp not in ends]
        if missing:
            raise TimeoutError(f"no end offset for {len(missing)} of the send queue's partitions")
        self.ends = ends
        tps = [TopicPartition(t, p) for t, p in self.partitions]
        done = self._committed.read(self._units_group, tps, timeout=REQUEST_TIMEOUT_S)
        return {tp: max(ends[tp] - done.get(tp, 0), 0) for tp in self.partitions}

    def least(self) -> TP:
        """The partition with the least backlog (an ordinary message's)."""
        backlog = self.current()
        return min(self.partitions, key=lambda tp: (backlog.get(tp, 0), tp))

    def new_group(self) -> TP:
        """A new group's partition: the least backlog, or within `slack` of it the
        previous group's."""
        best = self.least()
        last = self._last_group_tp
        backlog = self._estimate
        if last is None or backlog.get(last, 0) > backlog[best] + self._slack:
            last = self._last_group_tp = best
        return last

    def sent(self, tp: TP) -> None:
        """One more message on `tp`."""
        self._estimate[tp] = self._estimate.get(tp, 0) + 1
