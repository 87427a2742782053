"""The receiver library's priority bands (docs/explanation/priority.md): read every band topic of
its queues (`<queue>`, `<queue>.p1`, ...), the highest band with a backlog first, each lower band
keeping its minimum share (`router.contract.bandsched`), and never switch bands in the middle of a
group it is handing out.

The router appends nothing to any band of a queue while a group is open there, so a
record of another band that comes while a group is being handed out was appended after
the group's final: it is read again later (the consumer seeks back to it, and its
partition is paused) once the group's final is done (an abandoned final comes again
first). The application therefore sees each group whole, with nothing of another band
inside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from router.backends.kafka.endoffsets import EndOffsets, Watermarks
from router.contract.bandsched import BandScheduler
from router.contract.headers import TTL_MS as GUARANTEE_TTL
from router.contract.priority import band_topic, band_topics, bands_in, split
from router.receiver.bandlag import BandLag
from router.receiver.received import Received

log = logging.getLogger("router.receiver")

TP = tuple[str, int]
MIN_SHARE = 0.1
WATERMARK_TIMEOUT_S = 2.0
# A group being handed out holds its queue's other bands until its final, or until its
# band had nothing more to read for its TTL (`guarantee-ttl-ms`, else this: the router's
# default `routing.default_ttl_ms`, which `Receiver.from_settings` passes on). Any sooner,
# an older record of a lower band (appended before the group opened, passed over for the
# higher band) would be handed out between a slow sender's members.
HOLD_IDLE_S = 300.0


class ReceiverBands:
    def __init__(
        self,
        consumer: Any,
        queues: Sequence[str],
        bands: int,
        topics: Collection[str] | None = None,
        *,
        ends: Watermarks,
    ) -> None:
        """`topics`: those that exist (None: every band topic of every queue); `ends`:
        where partitions' watermarks are asked (not through `consumer`, whose answers wait
        behind its fetch in flight: `router.backends.kafka.endoffsets`)."""
        self.consumer = consumer
        self.ends = ends
        self.bases = frozenset(queues)
        self.bands = bands
        self.topics = [
            b
            for q in queues
            for b in band_topics(q, bands)
            if topics is None or b == q or b in topics
        ]
        self.scheduler = BandScheduler(bands, min(MIN_SHARE, 0.5 / max(bands - 1, 1)))
        self.open: dict[str, int] = {}  # queue -> the band of the group being handed out
        self.paused: set[TP] = set()  # paused here
        self.rewound: set[TP] = set()  # sought back until its queue's group ends
        self.measure = BandLag(consumer, self.bases, bands, ends)
        self.lag = self.measure.lag  # each partition's, as last measured
        self.idle: dict[str, float] = {}  # queue -> since when its held band had nothing
        self.hold_idle_s = HOLD_IDLE_S
        self.holds: dict[str, float] = {}  # queue -> its open group's TTL, s (if it has one)
        self.gids: dict[str, str | None] = {}  # queue -> the guarantee ID of its open group
        self.finishing: set[str] = set()  # queues whose group's final is out, not yet done

    @classmethod
    def of(
        cls,
        consumer: Any,
        queues: Sequence[str],
        topics: Collection[str],
        admin_config: Mapping[str, Any],
    ) -> ReceiverBands | None:
        """Band selection for `queues` if the topology has band topics (from the broker's
        topic list `topics`); None if none of them has any. Each queue is read in the bands
        it has: a queue without band topics among them (the events topic beside the
        receive queues, say) does not hide the others' bands. `admin_config`: an admin
        client's, for asking watermarks on a connection of its own."""
        bands = max(bands_in(topics, q) for q in queues) if queues else 1
        if bands == 1:
            return None
        ends = EndOffsets(admin_config, WATERMARK_TIMEOUT_S)  # last stable offsets
        return cls(consumer, queues, bands, topics, ends=ends)

    def _readable(self, backlog: list[int]) -> list[int]:
        """`backlog` less what a hold makes unreadable (another band of a queue whose group
        is being handed out): a turn for it would read nothing, and other queues' bands
        would wait meanwhile."""
        out = list(backlog)
        for (topic, _), lag in self.lag.items():
            queue, band = split(topic, self.bases)
            held = self.open.get(queue)
            if held is not None and held != band and lag > 0:
                out[band] = max(out[band] - lag, 0)
        return out

    def _release_idle(self) -> None:
        """A group whose band of its queue has had nothing more to read for its TTL (its
        sender stopped, the router swept it) no longer holds the queue's other bands:
        nothing of them can belong inside it."""
        now = time.monotonic()
        for queue, band in list(self.open.items()):
            topic = band_topic(queue, band)
            if any(lag > 0 for (t, _), lag in self.lag.items() if t == topic):
                self.idle.pop(queue, None)
                continue
            since = self.idle.setdefault(queue, now)
            if now - since >= self.holds.get(queue, self.hold_idle_s):
                log.warning(
                    "%s: a group in band %d has had nothing more for %.0f s; reading the "
                    "queue's other bands again",
                    queue,
                    band,
                    now - since,
                )
                self._close(queue)

    def before_poll(self, waiting: Collection[TP] = ()) -> None:
        """Pause and resume band topics for the next read. `waiting`: partitions paused by
        another step (`router.receiver.redelivery` after a failure), which only it resumes."""
        try:
            assigned = self.consumer.assignment()
            backlog = self.measure.backlog(assigned, self.paused) if assigned else None
        except KafkaException as exc:  # a rebalance under way: decide next time
            log.debug("no backlog to decide bands by: %s", exc)
            return
        if backlog is None:
            return
        self._release_idle()
        turn = self.scheduler.next(self._readable(backlog))
        stop, go = [], []
        for tp in assigned:
            key = (tp.topic, tp.partition)
            queue, band = split(tp.topic, self.bases)
            held = self.open.get(queue)
            wanted = band == held if held is not None else band in turn.bands
            if held is None or band == held:
                self.rewound.discard(key)
            wanted = wanted and key not in self.rewound
            if not wanted:
                stop.append(key)
            elif key in self.paused and key not in waiting:
                go.append(key)
        if stop:
            self.consumer.pause([TopicPartition(*k) for k in stop])
            self.paused.update(stop)
        if go:
            self.consumer.resume([TopicPartition(*k) for k in go])
            self.paused.difference_update(go)

    def admit(self, message: Received) -> bool:
        """Whether `message` may be handed out now. A record of another band of a queue
        whose group is being handed out is read again after the group (and so is every
        record after it on its partition, already fetched or not)."""
        queue, band = split(message.topic, self.bases)
        key = (message.topic, message.partition)
        if key in self.rewound:
            return False
        held = self.open.get(queue)
        gid = message.guarantee_id
        if held == band and gid != self.gids.get(queue):
            if queue in self.finishing:
                # After the held group's final, handed out but not done (it may still be
                # abandoned and come again): the hold stays, taken over by the next group
                # of the same band if this record starts one.
                if gid is not None and not message.final:
                    self._open(queue, band, message)
            else:
                # Another record of the group's own band: the router appends nothing to
                # the queue inside an open group's span (unless its busy policy shared
                # it), so the group ended without a final reaching the queue (stopped,
                # expired, its final dead-lettered): its hold ends here, not after its TTL.
                self._close(queue)
                held = None
        if held is not None and band != held:
            tp = TopicPartition(message.topic, message.partition, message.offset)
            self.consumer.seek(tp)  # read again from here
            self.consumer.pause([TopicPartition(message.topic, message.partition)])
            self.paused.add(key)
            self.rewound.add(key)
            return False
        if gid is not None and queue not in self.open and not message.final:
            self._open(queue, band, message)
        elif gid is not None and message.final and self.gids.get(queue) == gid:
            self.finishing.add(queue)  # the hold ends once the final is done
        return True

    def done(self, message: Received) -> None:
        """`message` was processed: a group's final ends its hold here, not when it was
        handed out (an abandoned final comes again, and a record of another band fetched
        behind it must not be handed out before it)."""
        if message.final and message.guarantee_id is not None:
            queue, band = split(message.topic, self.bases)
            if (
                queue in self.finishing
                and self.open.get(queue) == band
                and self.gids.get(queue) == message.guarantee_id
            ):
                self._close(queue)

    def restore(self, held: Mapping[str, tuple[int, Received]]) -> None:
        """Holds found in the data for queues taken over (`router.receiver.bandrestore`): a group
        the previous owner handed out part way holds its queue's other bands here too."""
        for queue, (band, member) in held.items():
            if queue in self.bases and queue not in self.open:
                log.info("%s: group %s open in band %d; its other bands wait for it",
                         queue, member.guarantee_id, band)  # fmt: skip
                self._open(queue, band, member)

    def reopen(self, message: Received) -> None:
        """`message` (a group's member) was given back undone: its group holds its queue's
        other bands again until its final is done (the hold may have ended: a final done
        by then, or another group of the same band that took the hold over)."""
        if message.guarantee_id is None:
            return
        queue, band = split(message.topic, self.bases)
        if queue not in self.open:
            self._open(queue, band, message)

    def _open(self, queue: str, band: int, message: Received) -> None:
        self.finishing.discard(queue)
        self.open[queue] = band
        self.gids[queue] = message.guarantee_id
        self.idle.pop(queue, None)
        ttl = _ttl_s(message)
        if ttl is None:
            self.holds.pop(queue, None)
        else:
            self.holds[queue] = ttl

    def _close(self, queue: str) -> None:
        self.finishing.discard(queue)
        self.open.pop(queue, None)
        self.gids.pop(queue, None)
        self.idle.pop(queue, None)
        self.holds.pop(queue, None)

    def forget(self, key: TP) -> None:
        self.paused.discard(key)
        self.measure.forget(key)
        self.rewound.discard(key)
        queue, band = split(key[0], self.bases)
        if self.open.get(queue) == band:  # its group went with it; a kept band's stays
            self._close(queue)


def _ttl_s(message: Received) -> float | None:
    """The group's `guarantee-ttl-ms` in seconds, if the member carries a readable one."""
    raw = next((v for k, v in message.headers if k == GUARANTEE_TTL), None)
    try:
        ttl = int(raw) if raw else 0
    except ValueError:
        return None
    return ttl / 1000 if ttl > 0 else None
