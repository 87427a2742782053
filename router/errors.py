"""The base of every exception the router defines: `except RouterError` catches anything
the router raised on purpose, whatever its layer. Each subclass keeps the built-in base it
had (a `BadSegment` is still a `ValueError`, a `ReceiveTimeout` a `TimeoutError`), so code
that caught those keeps working.

Four classes here name a decision a caller can act on, whoever raised them: the call or
message is wrong (`InvalidRequest`), the configuration is (`ConfigError`), something the
call needs is not set up yet (`NotReady`), or a wait ran out (`TimedOut`). The others are
raised by one part of the router each, and defined beside it.

The whole hierarchy, with when each class is raised and its built-in base, and the
built-ins the router still raises on purpose (its own invariants, outages in the clients'
own terms, the packaged schemas): docs/reference/errors.md.
"""


class RouterError(Exception):
    """Anything the router raised on purpose."""


class InvalidRequest(RouterError, ValueError):
    """The router refuses this call or this message (its arguments, its headers):
    nothing was sent or changed. Fix the call and make it again; the client, and the
    router, carry on. Raised, for example, by `Sender.send` for a routing, priority or
    multicast header given twice or malformed, or a number its group cannot take."""


class ConfigError(RouterError, ValueError):
    """The configuration contradicts itself or what the router needs: the settings, a
    `Sender`'s or `Receiver`'s librdkafka dict and options, or a cluster with too few
    brokers for `kafka.replication_factor`. Nothing was started: fix the configuration.

    `load_settings` raises it with the message of the error it wraps (its `__cause__`:
    pydantic's `ValidationError`, or a TOML file or environment variable that cannot be
    read). The settings' validators raise it too, and pydantic reports it in its own
    `ValidationError`: a settings model built directly raises that, as pydantic does."""


class ConfigNotFound(ConfigError, FileNotFoundError):
    """The configuration file named (`--config`, `ROUTER_CONFIG`) does not exist. A
    `FileNotFoundError` as it always was, and a `ConfigError` (so a `ValueError` too)."""


class NotReady(RouterError, RuntimeError):
    """What the call needs is not set up: a topology's queues that do not exist (yet: run
    `router topics create`), or the state (`state=`, a Redis URL) a client was built
    without. Set it up, then try again."""


class TimedOut(RouterError, TimeoutError):
    """A wait ran out: topics that did not appear in the broker's metadata, a partition
    not read to its end, no message (`ReceiveTimeout`). Nothing is known to be wrong;
    the same call may succeed later."""
