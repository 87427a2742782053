"""A client's fatal error as the KafkaException it is.

confluent-kafka (2.16) raises a fatal error (a transactional producer fenced, say) by
setting a KafkaException in its error callback and stopping the callbacks. If librdkafka
serves another callback in the same call (a log line to the clients' `logger`, as a
`flush` that goes on past the error does), Python runs it with that exception pending, and
the call ends in `SystemError: <class 'logging.LogRecord'> returned a result with an
exception set`, the KafkaException its `__cause__`. A send unit took that for a crash and
exited 1 in a chaos run (2026-12-02) instead of replacing its producer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn, cast

from confluent_kafka import KafkaError, KafkaException


def unmasked(exc: BaseException) -> BaseException:
    """The KafkaException a SystemError of confluent-kafka's masks, else `exc`. The
    SystemError is let go of everything it holds: confluent-kafka keeps a reference to it
    for good, and its traceback's frames hold the failed call's client."""
    cause: BaseException | None = exc.__cause__
    if isinstance(exc, SystemError) and isinstance(cause, KafkaException):
        exc.__traceback__ = exc.__cause__ = exc.__context__ = None
        return cast(BaseException, cause)
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
