"""Lifetime at the last hop: the receiver library's expiry rules (pure; no I/O).

A message alive when the receive unit wrote it may still expire on its receive queue,
before an application takes it (a slow or stopped receiver, a backlog). The receiver
library judges it as the units do (`router.contract.lifetime`), by the instant the send unit
stamped (`router-expires-at`) and the message's own `message-expires-at` /
`message-lifetime-ms`, the earliest winning. One found expired is not handed to the
application: `router.receiver.expiry` writes its ExpiredMessage event (hop `RECEIVER`),
then lets the receiver move past it. A grouped member's outcome is its
`message-on-expiry`, else the receiver's default (`ExpiryOptions.on_expiry`, from
`routing.on_expiry`):

* `skip`: the member alone is not handed out; the group goes on (`Expired.gap`), its
  gap shown by the event's `seq`, the group's status (`expired_seqs`) and, for
  `receive_group`, the `ReceivedGroup` (`complete=False`, `expired_seqs`);
* `expire-group`: the group stops there (`Expired.stops_group`), as under the units'
  expire-group: a GroupStopped event (reason `expired`) and every later member dead-lettered
  as `group-stopped`, up to its final.

An expired final ends its group either way (`Expired.ends_group`). A lifetime header the
receiver cannot read (it was validated by the send unit, so only a record written to a
receive queue by hand has one) leaves the message alive: it is handed out, with a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from router.config.settings import RouterSettings
from router.contract import lifetime
from router.contract.headers import BadInput
from router.contract.lifetime import Lifetime, OnExpiry
from router.errors import ConfigError
from router.receiver.received import Headers, Received

log = logging.getLogger("router.receiver")

HOP = "receiver"
DEFAULT_MAX_LIFETIME_MS = 30 * 24 * 3600 * 1000  # as routing.max_lifetime_ms


@dataclass(frozen=True, slots=True)
class ExpiryOptions:
    """How the receiver judges lifetimes (`Receiver(..., expiry=...)`; None: it does not).

    `min_lifetime_ms`, `max_lifetime_ms`: the bounds of `message-lifetime-ms`
    (`routing.min_lifetime_ms`, `routing.max_lifetime_ms`); `on_expiry`: a grouped
    member's outcome when its `message-on-expiry` does not say (`routing.on_expiry`)."""

    min_lifetime_ms: int = 1
    max_lifetime_ms: int = DEFAULT_MAX_LIFETIME_MS
    on_expiry: OnExpiry = "skip"

    @classmethod
    def of(cls, settings: RouterSettings) -> ExpiryOptions:
        r = settings.routing
        return cls(r.min_lifetime_ms, r.max_lifetime_ms, r.on_expiry)

    def __post_init__(self) -> None:
        if not 1 <= self.min_lifetime_ms <= self.max_lifetime_ms:
            raise ConfigError(
                "lifetime bounds must satisfy 1 <= min_lifetime_ms <= max_lifetime_ms"
            )
        if self.on_expiry not in lifetime.ON_EXPIRY_VALUES:
            raise ConfigError(f"on_expiry must be one of {lifetime.ON_EXPIRY_VALUES}")


@dataclass(frozen=True, slots=True)
class Expired:
    """A message the receiver found expired: its lifetime, the event's reason (with the
    message's group, seq and final), and what it does to its group."""

    lifetime: Lifetime
    reason: BadInput
    stops_group: bool  # expire-group on a member that is not the final
    ends_group: bool  # nothing more of the group comes: the final, or a stop

    @property
    def gap(self) -> bool:
        """A grouped member skipped while its group goes on."""
        return self.reason.guarantee_id is not None and not self.ends_group

    @property
    def on_expiry(self) -> OnExpiry | None:
        """The group's outcome (None for an ordinary message)."""
        return self.lifetime.on_expiry if self.reason.guarantee_id is not None else None


def judge(m: Received, now_ms: int, options: ExpiryOptions) -> Expired | None:
    """`m` if its lifetime ended at or before `now_ms`, else None (also for no lifetime,
    or one the receiver cannot read: logged, handed out)."""
    try:
        life = _read(m.headers, m.timestamp_ms, options)
    except BadInput as bad:
        # The send unit checked the message's own headers against the router's bounds and
        # stamped the instant: a receiver with other bounds still honours that instant.
        life = _stamped(m, options)
        what = "judged by router-expires-at alone" if life else "handed out as alive"
        log.warning("%s[%d]@%d: %s; %s", m.topic, m.partition, m.offset, bad, what)
    if life is None:
        return None
    gone = lifetime.expired_input(life, now_ms, HOP)
    if gone is None:
        return None
    gone.guarantee_id, gone.seq, gone.final = m.guarantee_id, m.seq, m.final
    gone.expires_ms, gone.on_expiry = life.expires_ms, life.on_expiry
    grouped = m.guarantee_id is not None
    stops = grouped and not m.final and life.on_expiry == "expire-group"
    return Expired(life, gone, stops, grouped and (m.final or stops))


def _read(headers: Headers, timestamp_ms: int | None, options: ExpiryOptions) -> Lifetime | None:
    return lifetime.read(
        headers,
        timestamp_ms,
        min_lifetime_ms=options.min_lifetime_ms,
        max_lifetime_ms=options.max_lifetime_ms,
        default_on_expiry=options.on_expiry,
    )


def _stamped(m: Received, options: ExpiryOptions) -> Lifetime | None:
    """The lifetime by the send unit's `router-expires-at` (and the message's
    `message-on-expiry` if readable) alone; None if it has none or it is unreadable."""
    stamped = [(k, v) for k, v in m.headers if k == lifetime.ROUTER_EXPIRES_AT]
    if not stamped:
        return None
    outcome = [(k, v) for k, v in m.headers if k == lifetime.ON_EXPIRY]
    for headers in ([*stamped, *outcome], stamped):
        try:
            return _read(headers, m.timestamp_ms, options)
        except BadInput:
            continue
    return None


def stop_reason(m: Received, found: Expired) -> BadInput:
    """The GroupStopped event's reason for a group stopped by its expired member."""
    bad = BadInput(
        lifetime.EXPIRED,
        f"member {m.topic}[{m.partition}]@{m.offset} expired: {found.reason.detail}",
    )
    bad.guarantee_id, bad.seq, bad.final = m.guarantee_id, m.seq, m.final
    return bad
