"""confluent-kafka's fatal errors unmasked (`router.backends.kafka.fatal`): a SystemError
raised because a callback ran with the fatal KafkaException pending gives way to that
KafkaException; any other SystemError is left as it is. (Against the real client and
broker: `test_a_fenced_producer_whose_flush_goes_on_logging_is_replaced_not_crashed` in
tests/integration/unit/test_session.py.)"""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
from confluent_kafka import KafkaError, KafkaException

from router.backends.kafka.callthread import CallThread
from router.backends.kafka.fatal import fatal_unmasked, is_fatal, unmasked

FENCED = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))


def masked() -> None:
    """What confluent-kafka's call raises: the SystemError, from the pending error."""
    raise SystemError(
        "<class 'logging.LogRecord'> returned a result with an exception set"
    ) from FENCED


def test_the_kafka_exception_a_system_error_masks_is_raised_in_its_place() -> None:
    with pytest.raises(KafkaException) as raised, fatal_unmasked():
        masked()
    assert raised.value is FENCED and raised.value.args[0].fatal()


@pytest.mark.parametrize(
    "cause", [None, ValueError("not Kafka's")], ids=["no cause", "another cause"]
)
def test_any_other_system_error_is_left_as_it_is(cause: BaseException | None) -> None:
    error = SystemError("something else")
    error.__cause__ = cause
    assert unmasked(error) is error
    with pytest.raises(SystemError) as raised, fatal_unmasked():
        raise error
    assert raised.value is error


def test_other_exceptions_pass_through() -> None:
    assert unmasked(FENCED) is FENCED
    with pytest.raises(KeyError), fatal_unmasked():
        raise KeyError("x")


def test_a_call_on_the_call_thread_fails_with_the_kafka_exception() -> None:
    calls = CallThread("test-fatal")
    try:
        done = calls.submit(masked)
        with pytest.raises(KafkaException) as raised:
            CallThread.wait(done, 5.0, threading.Event(), 1.0)
        assert raised.value.args[0].code() == KafkaError._FENCED
    finally:
        calls.retire()


def test_the_masking_system_error_keeps_nothing_of_the_failed_call() -> None:
    """confluent-kafka keeps a reference to the SystemError for good: once unmasked and
    handled, nothing holds a frame of the failed call (whose locals hold the client), even
    with no garbage collection."""

    class Client:
        pass

    kept: list[SystemError] = []  # as confluent-kafka keeps it

    def call(client: Client) -> None:
        try:  # the KafkaException is confluent-kafka's: no frame of ours holds it
            raise SystemError("returned a result with an exception set") from KafkaException(
                KafkaError(KafkaError._FENCED, "fenced", fatal=True)
            )
        except SystemError as exc:
            kept.append(exc)
            raise

    client = Client()
    ref = weakref.ref(client)
    gc.disable()
    try:
        try:
            with fatal_unmasked():
                call(client)
        except KafkaException:
            pass  # handled: the caller keeps nothing
        else:
            pytest.fail("the KafkaException was not raised")
        del client
        assert ref() is None, "the failed call's client outlived it"
        assert kept[0].__traceback__ is None and kept[0].__cause__ is None
    finally:
        gc.enable()


def test_only_a_fatal_error_or_a_call_after_one_is_fatal() -> None:
    assert is_fatal(KafkaException(KafkaError(KafkaError._FENCED, "f", fatal=True)))
    assert is_fatal(KafkaException(KafkaError(KafkaError._FATAL, "after")))
    assert not is_fatal(KafkaException(KafkaError(KafkaError._TIMED_OUT, "t")))
    assert not is_fatal(KafkaException("no KafkaError"))


def test_a_call_that_lost_its_error_is_a_fatal_error_of_the_client() -> None:
    """Seen in a fenced producer's flush that served a delivery report after the fatal
    error: the error was lost, and the call failed with no exception of its own."""
    lost = SystemError(
        "<method 'flush' of 'cimpl.Producer' objects> returned NULL without setting an exception"
    )
    with pytest.raises(KafkaException) as raised, fatal_unmasked():
        raise lost
    assert is_fatal(raised.value) and "lost in confluent-kafka" in str(raised.value)
    other = SystemError("something else")
    assert unmasked(other) is other
