"""A client's fatal error as the KafkaException it is.

confluent-kafka (2.16) raises a fatal error (a transactional producer fenced, say) by
setting a KafkaException in its error callback and stopping the callbacks. If librdkafka
serves another callback in the same call (a log line to the clients' `logger`, as a
`flush` that goes on past the error does), Python runs it with that exception pending, and
the call ends in `SystemError: <class 'logging.LogRecord'> returned a result with an
exception set`, the KafkaException its `__cause__`. A send unit took that for a crash and
exited 1 in a chaos run (2026-12-02) instead of replacing its producer. If the callback
served after it is a delivery report's, the exception may be lost instead: the call ends in
`SystemError: ... returned NULL without setting an exception`, with no cause; that is taken
as a fatal error of the client too (a `_FATAL` KafkaException), so the client is replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn, cast

from confluent_kafka import KafkaError, KafkaException

# What CPython says of a C call that failed without an exception: confluent-kafka's, when the
# fatal error its error callback set was cleared by a delivery callback served after it in
# the same call (seen in a `flush`, 2026-12-02).
LOST = "returned NULL without setting an exception"


def unmasked(exc: BaseException) -> BaseException:
    """The KafkaException a SystemError of confluent-kafka's masks, else `exc`. The
    SystemError is let go of everything it holds: confluent-kafka keeps a reference to it
    for good, and its traceback's frames hold the failed call's client."""
    cause: BaseException | None = exc.__cause__
    if isinstance(exc, SystemError) and isinstance(cause, KafkaException):
        exc.__traceback__ = exc.__cause__ = exc.__context__ = None
        return cast(BaseException, cause)
    if isinstance(exc, SystemError) and cause is None and LOST in str(exc):
        # A callback's exception (the fatal error's, or a delivery callback's raised after
        # it) was lost on the way: the client is in no known state; as fatal.
        why = f"the client's error was lost in confluent-kafka ({exc})"
        exc.__traceback__ = exc.__context__ = None
        return cast(BaseException, KafkaException(KafkaError(KafkaError._FATAL, why, fatal=True)))
    return exc


def reraise(exc: SystemError) -> NoReturn:
    """Raise the KafkaException `exc` masks, else `exc` (in an `except SystemError` around
    a call made for every message, where a `with` would cost more than the call)."""
    cause = unmasked(exc)
    if cause is exc:
        raise exc
    try:
        raise cause from None
    finally:  # else this frame and the exception hold each other (and the client)
        del cause, exc


@contextmanager
def fatal_unmasked() -> Iterator[None]:
    """Around a client call: the KafkaException a SystemError masks is raised in its place."""
    try:
        yield
    except SystemError as exc:
        reraise(exc)


def is_fatal(exc: KafkaException) -> bool:
    """The client that raised `exc` can do nothing more: fatally failed (fenced, or an
    idempotent producer's sequence lost), or `_FATAL` (a call on a client that failed so
    before). Only a new client goes on."""
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and (err.fatal() or err.code() == KafkaError._FATAL)
