"""The base of every exception the router defines: `except RouterError` catches anything
the router raised on purpose, whatever its layer. Each subclass keeps the built-in base it
had (a `BadSegment` is still a `ValueError`, a `ReceiveTimeout` a `TimeoutError`), so code
that caught those keeps working.

Four classes here name a decision a caller can act on, whoever raised them: the call or
message is wrong (`InvalidRequest`), the configuration is (`ConfigError`), something the
call needs is not set up yet (`NotReady`), or a wait ran out (`TimedOut`). The others are
raised by one part of the router each, and defined beside it.

Built-ins the router still raises, deliberately: `AssertionError`, and `ValueError` or
`RuntimeError` for its own invariants (a defect, never a caller's mistake: a unit's batch
ID or targets, the pure placement model, a session's state transition, the band
scheduler's input); `KafkaException` and `redis.ConnectionError` for an outage, in the
client's own terms (the run loops back off on those); `KeyError` and `FileNotFoundError`
for the Avro schemas the router ships (`router.contract.schemas`); `RuntimeError` when a
role process cannot serve `metrics.port`; `AttributeError` from `router.__getattr__`. The
command line (`router.cli.main`) reports errors as click exceptions.

Error hierarchy
---------------

Each class, in parentheses its built-in base (`except` on that base still catches it),
then when it is raised::

    RouterError (Exception)  anything the router raised on purpose
    |
    +-- InvalidRequest (ValueError)  the router refuses a call or a message, nothing was
    |   |   sent or changed: `Sender.send`'s routing, priority or multicast headers, a
    |   |   group number the group cannot take, `Receiver.consume`'s arguments, the
    |   |   helpers that make headers (`router.contract`), ACL roles
    |   |   (`router.security.acls`), a steering destination of a table
    |   +-- BadSegment (ValueError)  a record's segment headers are malformed
    |   |   (`router.contract.segments`)
    |   +-- UnknownState (ValueError)  a table entry state that does not exist
    |       (`router.table.view`)
    +-- ConfigError (ValueError)  configuration contradicts itself or what the router
    |   |   needs, nothing was started: `load_settings` (pydantic's ValidationError as its
    |   |   `__cause__`, same message) and the settings' validators, a secret file that
    |   |   cannot be read, a `Sender`'s or `Receiver`'s librdkafka dict and options, a
    |   |   cluster with fewer brokers than `kafka.replication_factor`
    |   +-- ConfigNotFound (FileNotFoundError)  `load_settings`' configuration file does
    |       not exist
    +-- NotReady (RuntimeError)  a topology's queues do not exist yet (`router topics
    |       create`), or a call needs the `state=` its client was built without
    +-- TimedOut (TimeoutError)  a wait ran out: topics to appear in the broker's
    |   |   metadata, a resumed sender's read of a partition's tail
    |   +-- ReceiveTimeout (TimeoutError)  `Receiver.receive` / `receive_group`: nothing
    |       came in time (`router.receiver`)
    +-- DeliveryFailed  messages Kafka did not acknowledge (`router.sender`)
    +-- SenderFenced (RuntimeError)  another sender took this sender ID over
    |       (`router.sender`, `router.state.store`)
    +-- SegmentError  a segmented message that cannot be handed over whole
    |       (`router.receiver`)
    +-- DeadLetterFailed (RuntimeError)  a dead letter or event the receiver wrote was not
    |       acknowledged (`router.receiver.letters`)
    +-- RedisRefused (RuntimeError)  Redis refused the credentials or an ACL, at start-up
    |       (`router.security.redis`)
    +-- KafkaRefused (RuntimeError)  Kafka refused the credentials or an ACL is missing,
    |       at start-up (`router.security.kafka`)
    +-- SteerError  a steering action refused, nothing changed (`router.table.steer`)
    +-- BadInput  a message a unit dead-letters, with the reason (`router.contract`)
    +-- FatalUnitError (RuntimeError)  a unit cannot continue and exits non-zero
    |       (`router.unit.source`)
    +-- TxnFailed  a unit's batch transaction failed (`router.unit.commit.session`)
    +-- LeaseLost  a batch's leases lapsed before it was produced
    |       (`router.unit.commit.leases`)
    +-- NotReplicated (redis.ConnectionError)  too few Redis replicas acknowledged a
    |       batch's writes (`router.unit.commit.replica_acks`)
    +-- Abandoned  a call on a unit's call thread did not return in time
    |       (`router.backends.kafka.callthread`)
    +-- HorizonUnknown  the sweeper has no horizon this round (`router.sweeper.horizon`)
    +-- _Unreachable  private to the sweeper's horizon

From `BadInput` down, they stay inside the router's own processes (a unit, the sweeper):
a library caller does not meet them.
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
