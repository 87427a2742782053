"""Read partitions to their end with read_committed, once nothing writes there any more:
the final read of a run (`ops.harness.traffic.collect.read_sides`) and of the tests.
"Nothing more arrives" is shown, not waited for: `wait_out_transactions` lets every
transaction a killed writer could have left open time out and be aborted, and
`read_to_end` ends only when a read_committed consumer stands at every partition's high
watermark (which it cannot pass while a transaction is open) and the watermarks stay put.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, IsolationLevel, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from router.config import KafkaSettings

log = logging.getLogger("router.collect")

# transaction.abort.timed.out.transaction.cleanup.interval.ms of the broker (ops/stack.sh):
# a timed-out transaction is aborted at the first check after its timeout.
ABORT_CHECK_INTERVAL_MS = 1_000


def wait_out_transactions(transaction_timeout_ms: int, since: float) -> None:
    """Sleep until every transaction open at `since` (a `time.monotonic()` instant, when
    the last writer stopped or was killed) has timed out and been aborted by the broker."""
    wait = since + (transaction_timeout_ms + ABORT_CHECK_INTERVAL_MS) / 1000 - time.monotonic()
    if wait > 0:
        time.sleep(wait)


class Unresolved(TimeoutError):
    """A read_committed consumer could not reach a partition's end: a transaction there
    was never committed or aborted."""


def read_to_end(
    kafka: KafkaSettings, partitions: Mapping[str, TopicPartition], timeout: float = 120.0
) -> dict[str, list[Message]]:
    """Every committed record of `partitions` (name -> partition), from the beginning to
    the high watermark, read with read_committed until every position stands at the high
    watermark and the watermarks stay put. Call it once nothing writes there any more (a
    writer that was killed: after `wait_out_transactions`). Raises `Unresolved` after
    `timeout` s."""
    consumer = Consumer(
        {
            **kafka.common(),
            "group.id": f"final-read-{uuid.uuid4().hex[:10]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    names = {(tp.topic, tp.partition): name for name, tp in partitions.items()}
    got: dict[str, list[Message]] = {name: [] for name in partitions}
    deadline = time.monotonic() + timeout
    # One ListOffsets request for all partitions (read_committed: the end is the last
    # stable offset). Not the consumer's get_watermark_offsets: one call per partition,
    # each queued behind the consumer's fetch long-poll on the broker's connection,
    # took about fetch.wait.max.ms (0.5 s) apiece.
    admin = AdminClient(kafka.common())

    def offsets(spec: OffsetSpec) -> dict[str, int]:
        futures = admin.list_offsets(
            {TopicPartition(tp.topic, tp.partition): spec for tp in partitions.values()},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=30,
        )
        found = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        return {n: found[(tp.topic, tp.partition)] for n, tp in partitions.items()}

    def ends() -> dict[str, int]:
        return offsets(OffsetSpec.latest())

    try:
        at = offsets(OffsetSpec.earliest())
        consumer.assign(
            [TopicPartition(tp.topic, tp.partition, at[n]) for n, tp in partitions.items()]
        )
        end = ends()
        while True:
            behind = [n for n in partitions if at[n] < end[n]]
            if not behind:
                end, before = ends(), end
                if end == before:
                    return got
                continue
            if time.monotonic() > deadline:
                raise Unresolved(
                    f"read_committed could not reach the end in {timeout:.0f} s on: "
                    + ", ".join(f"{n} (at {at[n]} of {end[n]})" for n in behind)
                )
            for m in consumer.consume(1000, 0.5):
                name, err = names[(m.topic(), m.partition())], m.error()
                if err is None:
                    got[name].append(m)
                    at[name] = max(at[name], m.offset() + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    at[name] = max(at[name], m.offset())
                else:
                    log.warning("reading %s: %s", name, err)
            for tp in consumer.position([partitions[n] for n in behind]):
                name = names[(tp.topic, tp.partition)]
                at[name] = max(at[name], tp.offset)
    finally:
        consumer.close()
