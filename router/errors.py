"""The base of every exception the router defines: `except RouterError` catches anything
the router raised on purpose, whatever its layer. Each subclass keeps the built-in base it
had (a `BadSegment` is still a `ValueError`, a `ReceiveTimeout` a `TimeoutError`), so code
that caught those keeps working."""


class RouterError(Exception):
    """Anything the router raised on purpose."""
