"""A background sampler of every destination lane's last stable offset while a run goes
on: when each record became visible to read_committed readers
(`ops.harness.verdict.visibility`), which bounds when the router released the groups
whose finals it carried. It reads the broker's answers, never the router's state."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ops.harness.verdict.visibility import Visibility, record_change
from router.config import KafkaSettings

log = logging.getLogger("router.collect")

OFFSET_LATEST = -1  # ListOffsets' "latest": the LSO for a read_committed consumer


class LsoSampler:
    """Every `interval_s`, one ListOffsets round (read_committed) over `lanes`; the
    instants at which each lane's LSO rose (`visibility()`). A round that fails (a broker
    restarting) is counted and skipped: the records it would have seen are then seen by
    a later round, later, which only makes the bound looser."""

    def __init__(
        self,
        kafka: KafkaSettings,
        lanes: Mapping[str, TopicPartition],
        interval_s: float = 0.05,
        timeout_s: float = 2.0,
    ) -> None:
        self._kafka = kafka
        self._lanes = dict(lanes)
        self._interval = interval_s
        self._timeout = timeout_s
        self._changes: dict[str, list[tuple[int, int]]] = {n: [] for n in self._lanes}
        self.rounds = 0
        self.failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="lso-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self._timeout + 10)

    def visibility(self) -> Visibility:
        with self._lock:
            return Visibility({n: tuple(c) for n, c in self._changes.items()})

    def _run(self) -> None:
        consumer = Consumer(
            {
                **self._kafka.common(),
                "group.id": "lso-sampler",  # never joins or commits: offsets_for_times only
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        name_of = {(tp.topic, tp.partition): n for n, tp in self._lanes.items()}
        query = [
            TopicPartition(tp.topic, tp.partition, OFFSET_LATEST) for tp in self._lanes.values()
        ]
        try:
            while not self._stop.wait(self._interval):
                try:
                    answers = consumer.offsets_for_times(query, self._timeout)
                except KafkaException as e:
                    self.failed += 1
                    log.debug("an LSO round failed: %s", e)
                    continue
                at_ms = int(time.time() * 1000)  # after the answer: an upper bound
                with self._lock:
                    self.rounds += 1
                    for tp in answers:
                        name = name_of.get((tp.topic, tp.partition))
                        if name is not None and tp.error is None:
                            record_change(self._changes[name], tp.offset, at_ms)
        finally:
            consumer.close()
