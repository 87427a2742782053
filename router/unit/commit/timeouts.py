"""The transactional session's time limits, and which transactional failures leave a
request of the producer's epoch in the air.

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

TXN_TIMEOUT_S = 30.0  # librdkafka's own timeout for a transactional call
CALL_DEADLINE_S = TXN_TIMEOUT_S + 15  # ours: past it, the call is abandoned
# Offsets + commit (with its retries) and the release after it. After a broker restart
# librdkafka's send_offsets_to_transaction was seen to block past its own timeout
# (confluentinc/librdkafka#5456, #5511) in most short chaos runs, holding the unit and its
# partitions until this deadline; past it the call is abandoned and the producer replaced
# (the unit resumes from the committed offsets, whatever the abandoned call did).
COMMIT_DEADLINE_S = TXN_TIMEOUT_S + 15
# Healthy, send_offsets_to_transaction takes milliseconds (a few seconds while a restarted
# coordinator loads), and librdkafka ignores the timeout it is given (#5456: a coordinator
# request's timeout is never checked): a commit still in it after this long is abandoned
# as at COMMIT_DEADLINE_S, which short chaos runs waited out after each broker restart,
# the unit's partitions held meanwhile. Each commit abandoned there doubles it, up to
# COMMIT_DEADLINE_S (a coordinator merely slow gets the whole time); one that gets through
# sets it back (`router.unit.commit.finishing.OffsetsWatch`).
OFFSETS_DEADLINE_S = 10.0
# An abort that has not finished by then is given up on (a second such one in a row means
# BROKEN, and a new producer under the same transactional ID fences the old one and
# aborts its transaction). After a broker outage librdkafka's abort_transaction was seen
# to wait out its whole timeout twice ("retry call to resume"), holding a unit for a
# minute (tests/integration/faults/test_broker_outage.py: 76 s from the broker's return to the
# last record delivered, with 30 s); a healthy abort takes milliseconds.
ABORT_TIMEOUT_S = 5.0
STOP_GRACE_S = 10.0  # how long a stop request waits for a call that finishes a batch

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
