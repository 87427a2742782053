"""A batch's records into the open transaction, in order, with band barriers
(`router.unit.commit.session` `TransactionalSession.produce`)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from router.unit.commit.timeouts import TXN_TIMEOUT_S
from router.unit.steps.emit.records import Record


def produce_in_order(
    producer: Producer,
    records: list[Record],
    track: Callable[[tuple[str, int, int]], Callable[[Any, Any], None]] | None = None,
    barriers: Collection[int] = (),
) -> None:
    """Produce `records` in order. `track` gives the delivery callback of a record whose
    `source` is set. Before each position in `barriers`, every record produced so far is
    on the broker (flushed): records on different partitions are otherwise appended in no
    particular order. KafkaException if the producer refuses one, or a barrier's records
    are not on the broker in time."""
    produce, poll = producer.produce, producer.poll
    wait = set(barriers)
    for i, r in enumerate(records):
        if i in wait:
            appended(producer)
        while True:
            try:
                if r.source is not None and track is not None:
                    produce(
                        r.topic,
                        r.value,
                        r.key,
                        partition=r.partition,
                        headers=r.headers,
                        timestamp=r.timestamp,
                        on_delivery=track(r.source),
                    )
                else:
                    produce(
                        r.topic,
                        r.value,
                        r.key,
                        partition=r.partition,
                        headers=r.headers,
                        timestamp=r.timestamp,
                    )
                break
            except BufferError:
                poll(0.05)  # the local queue is full: let deliveries drain


def appended(producer: Producer) -> None:
    """Every record produced so far on the broker (a barrier), or the transaction fails:
    an unacknowledged record could still be appended after later ones."""
    if producer.flush(TXN_TIMEOUT_S) > 0:
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, "records not appended before a band barrier")
        )
