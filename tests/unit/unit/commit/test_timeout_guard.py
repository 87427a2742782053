"""The KIP-890 guard's decisions (`router.unit.commit.timeouts`): which failures leave the
session BROKEN, to be replaced, rather than FAILED, to be aborted and continued. A scripted
stand-in for the producer says what each call raises; the real-broker path is in
tests/integration/unit/test_session.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

from router.unit.commit import finishing
from router.unit.commit.timeouts import timed_out
from router.unit.commit.txnstate import TxnFailed, TxnState
from tests.fixtures.txnproducers import Scripted, StuckOffsets, commit_one, session_of


def timeout(**flags: bool) -> KafkaError:
    return KafkaError(KafkaError._TIMED_OUT, "timed out", **flags)


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
    ],
)
def test_a_time_out_is_told_from_other_failures(code: int) -> None:
    assert timed_out(KafkaError(code))
    assert not timed_out(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert not timed_out(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS))


def test_a_transaction_that_failed_of_a_time_out_is_broken_not_aborted() -> None:
    first = Scripted(commit_transaction=[timeout(txn_requires_abort=True)])
    session = session_of(first, Scripted())
    with pytest.raises(TxnFailed):
        commit_one(session)
    assert session.state is TxnState.BROKEN
    assert not session.abort() and "abort_transaction" not in first.calls
    assert session.replace() and session.state is TxnState.READY


def test_a_failure_that_is_no_time_out_is_still_aborted_with_the_same_producer() -> None:
    refused = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large", txn_requires_abort=True)
    first = Scripted(commit_transaction=[refused])
    session = session_of(first)
    with pytest.raises(TxnFailed):
        commit_one(session)
    assert session.state is TxnState.FAILED
    assert session.abort() and session.state is TxnState.READY
    commit_one(session)
    assert session.producer is first


def test_a_commit_retried_after_a_time_out_swaps_the_producer_at_the_next_begin() -> None:
    first = Scripted(commit_transaction=[timeout(retriable=True)])
    second = Scripted()
    session = session_of(first, second)
    commit_one(session)  # committed on the retry
    assert first.calls.count("commit_transaction") == 2
    assert session.state is TxnState.READY and session.suspect is not None
    commit_one(session)
    assert session.producer is second and session.suspect is None
    assert "begin_transaction" not in first.calls[first.calls.index("commit_transaction") :]
    assert second.calls[:2] == ["init_transactions", "begin_transaction"]
    assert session.metrics.get("producer_restarts") == 1


def test_a_retry_after_another_retriable_error_keeps_the_producer() -> None:
    busy = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading", retriable=True)
    first = Scripted(commit_transaction=[busy])
    session = session_of(first)
    commit_one(session)
    commit_one(session)
    assert session.suspect is None and session.producer is first


def test_a_suspect_producer_that_cannot_be_swapped_makes_the_batch_stale_and_broken() -> None:
    first = Scripted(commit_transaction=[timeout(retriable=True)])
    away = Scripted(init_transactions=[timeout(retriable=True)])
    session = session_of(first, away, Scripted())
    commit_one(session)
    generation = session.generation
    assert not session.begin(generation)  # the broker away: no new producer yet
    assert session.state is TxnState.BROKEN and session.generation == generation + 1
    assert "begin_transaction" not in away.calls
    assert session.replace() and session.state is TxnState.READY
    assert session.suspect is None


def test_an_abort_that_timed_out_is_broken_at_once() -> None:
    refused = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large", txn_requires_abort=True)
    first = Scripted(commit_transaction=[refused], abort_transaction=[timeout()])
    session = session_of(first)
    with pytest.raises(TxnFailed):
        commit_one(session)
    assert not session.abort()
    assert session.state is TxnState.BROKEN


def test_a_commit_whose_retry_after_a_time_out_fails_is_broken_not_aborted() -> None:
    """The first EndTxn timed out (its outcome unknown, the request maybe still on its
    way) and the retry failed otherwise: the batch's transaction saw a time-out, so it is
    BROKEN (the producer replaced, the unit resumes from the committed offsets), never
    aborted with the same producer and the batch replayed from its own first offsets."""
    refused = KafkaError(KafkaError.INVALID_TXN_STATE, "refused", txn_requires_abort=True)
    first = Scripted(commit_transaction=[timeout(retriable=True), refused])
    session = session_of(first, Scripted())
    with pytest.raises(TxnFailed):
        commit_one(session)
    assert first.calls.count("commit_transaction") == 2
    assert session.state is TxnState.BROKEN
    assert not session.abort() and "abort_transaction" not in first.calls
    assert session.replace() and session.suspect is None


def test_a_commit_stuck_sending_its_offsets_is_abandoned_long_before_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a broker restart librdkafka's send_offsets_to_transaction blocked past its own
    timeout until the commit's deadline (45 s, the unit's partitions held). A commit still
    in it after `OffsetsWatch.limit_s` is abandoned (the producer then replaced, as at the
    deadline); each such abandonment in a row doubles the limit, and a commit that gets
    through sets it back."""
    monkeypatch.setattr(finishing, "OFFSETS_DEADLINE_S", 0.5)
    stuck, second, third = StuckOffsets(), StuckOffsets(), Scripted()
    session = session_of(stuck, second, third)
    try:
        assert session.offsets.limit_s == 0.5
        began = time.monotonic()
        with pytest.raises(TxnFailed, match="send_offsets_to_transaction did not return"):
            commit_one(session)
        assert time.monotonic() - began < 5  # not the 45 s deadline
        assert session.state is TxnState.BROKEN and session.offsets.limit_s == 1.0
        assert session.replace() and session.producer is second
        began = time.monotonic()
        with pytest.raises(TxnFailed):
            commit_one(session)
        assert 1.0 <= time.monotonic() - began < 5  # the doubled limit
        assert session.offsets.limit_s == 2.0
        assert session.replace() and session.producer is third
        commit_one(session)
        assert session.offsets.limit_s == 0.5 and session.state is TxnState.READY
    finally:
        stuck.release.set()
        second.release.set()


def test_a_commit_past_its_offsets_is_not_abandoned_for_being_slow_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(finishing, "OFFSETS_DEADLINE_S", 0.2)

    class SlowCommit(Scripted):
        def commit_transaction(self, *args: Any) -> None:
            self.calls.append("commit_transaction")
            time.sleep(1.0)

    session = session_of(SlowCommit())
    commit_one(session)
    assert session.state is TxnState.READY and session.offsets.limit_s == 0.2


def test_an_offsets_call_that_failed_is_not_taken_for_one_that_never_returned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(A review's finding.) The call raised at once, and its outcome was collected after
    the limit: the real error, aborted with the same producer, the limit unchanged."""
    monkeypatch.setattr(finishing, "OFFSETS_DEADLINE_S", 0.2)
    busy = KafkaError(KafkaError.CONCURRENT_TRANSACTIONS, "busy", txn_requires_abort=True)
    first = Scripted(send_offsets_to_transaction=[busy])
    session = session_of(first)
    assert session.begin(session.generation)
    session.produce([])
    session.commit([], None)
    time.sleep(0.5)  # the run loop deciding the next batch meanwhile
    with pytest.raises(TxnFailed, match="busy"):
        session.wait_committed()
    assert session.state is TxnState.FAILED and session.offsets.limit_s == 0.2


def test_an_abandoned_commit_that_comes_back_late_does_not_taint_the_new_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(A review's finding.) The abandoned call returns after the producer was replaced,
    and its commit's first attempt times out: that says nothing of the new producer,
    which the next transaction keeps."""
    monkeypatch.setattr(finishing, "OFFSETS_DEADLINE_S", 0.3)
    stuck = StuckOffsets()
    stuck.errors["commit_transaction"] = [timeout(retriable=True)]
    second = Scripted()
    session = session_of(stuck, second)
    with pytest.raises(TxnFailed):
        commit_one(session)
    assert session.replace() and session.producer is second and session.suspect is None
    stuck.release.set()
    deadline = time.monotonic() + 5
    while stuck.calls.count("commit_transaction") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stuck.calls.count("commit_transaction") == 2  # timed out, then retried
    assert session.suspect is None
    commit_one(session)
    assert session.producer is second
