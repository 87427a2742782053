"""Which transactional failures leave a request of the producer's epoch in the air.

librdkafka has no transactions v2 (KIP-890, confluentinc/librdkafka#5423): a produce or
EndTxn request that timed out on the client may still reach the broker later, and under the
same producer epoch it lands in, or ends, the *next* transaction (a record of an aborted
batch committed with the next one; a late commit marker ending a transaction early). The
guard its maintainers suggest is to replace the producer after a timed-out transactional
request: the new instance's init_transactions bumps the epoch, which fences anything the
old one still has in flight. `router.unit.commit.session` does so after every failure or
retried call for which `timed_out` holds.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

TIMEOUTS = frozenset(
    {
        KafkaError._TIMED_OUT,  # an API call (commit, abort, flush) or our own deadline
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._MSG_TIMED_OUT,  # a record not delivered within message.timeout.ms
        KafkaError.REQUEST_TIMED_OUT,  # the broker's answer: the request timed out there
    }
)


def timed_out(err: KafkaError) -> bool:
    """Whether `err` may leave a request of this producer's epoch still on its way."""
    return err.code() in TIMEOUTS
