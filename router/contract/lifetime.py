"""Per-message lifetime (pure logic): the instant a message expires, from its headers.

Any producer may set, on a message of the send queues:

* `message-expires-at`: an absolute instant, milliseconds since the Unix epoch (UTC);
* `message-lifetime-ms`: a lifetime relative to the record's timestamp on the send queue
  (its CreateTime: when the producer made it), between `routing.min_lifetime_ms` and
  `routing.max_lifetime_ms`;
* `message-on-expiry` (a group's messages): what an expired member does to its group,
  `skip` (the member alone is not delivered; the group goes on, its sequence gap shown by
  the member's ExpiredMessage event) or `expire-group` (the group stops there, as under
  the stop-group poison policy). Default: `routing.on_expiry`.

With both, the earlier instant wins. The send unit writes the instant it computed on every
record it forwards or parks, as `router-expires-at`, so the receive unit and the receiver
library judge by the same instant whatever timestamp the transfer topic keeps. A message
is expired at a hop when that hop sees it at or after the instant: it is then never
forwarded, and an ExpiredMessage event goes to the events topic in the transaction that
commits its offset. A malformed lifetime header is bad input (`bad-lifetime`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from router.contract.headers import BadInput

EXPIRES_AT = "message-expires-at"
LIFETIME_MS = "message-lifetime-ms"
ON_EXPIRY = "message-on-expiry"
ROUTER_EXPIRES_AT = "router-expires-at"  # the instant, as the send unit computed it
HEADERS = frozenset({EXPIRES_AT, LIFETIME_MS, ON_EXPIRY, ROUTER_EXPIRES_AT})

EXPIRED = "expired"  # the reason code of an expired message (never dead-lettered)
BAD = "bad-lifetime"
OnExpiry = Literal["skip", "expire-group"]
ON_EXPIRY_VALUES: tuple[OnExpiry, ...] = ("skip", "expire-group")
MAX_INSTANT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: beyond is a unit mistake
MAX_DIGITS = 30  # a whole number of ms longer than this is out of every bound anyway


@dataclass(frozen=True, slots=True)
class Lifetime:
    expires_ms: int
    on_expiry: OnExpiry


def read(
    headers: Sequence[tuple[str, bytes | None]] | None,
    timestamp_ms: int | None,
    *,
    min_lifetime_ms: int,
    max_lifetime_ms: int,
    default_on_expiry: OnExpiry,
) -> Lifetime | None:
    """The message's expiry, or None if it has no lifetime. Raises BadInput(`bad-lifetime`)
    for a malformed, repeated or out-of-bounds header. `timestamp_ms`: the record's
    timestamp (None if it has none: a relative lifetime is then bad input)."""
    if not headers:
        return None
    seen: dict[str, bytes | None] = {}
    for key, value in headers:
        if key in HEADERS:
            if key in seen:
                raise BadInput(BAD, f"header {key!r} appears more than once")
            seen[key] = value
    if not seen:
        return None
    instants: list[int] = []
    for key in (EXPIRES_AT, ROUTER_EXPIRES_AT):
        if key in seen:
            at = _number(key, seen[key])
            if not 0 < at <= MAX_INSTANT_MS:
                raise BadInput(BAD, f"{key} {at} is not an instant in ms since the epoch")
            instants.append(at)
    if LIFETIME_MS in seen:
        lifetime = _number(LIFETIME_MS, seen[LIFETIME_MS])
        if not min_lifetime_ms <= lifetime <= max_lifetime_ms:
            raise BadInput(
                BAD,
                f"{LIFETIME_MS} {lifetime} is outside [{min_lifetime_ms}, {max_lifetime_ms}] "
                "(routing.min_lifetime_ms, routing.max_lifetime_ms)",
            )
        if timestamp_ms is None or timestamp_ms <= 0:
            raise BadInput(BAD, f"{LIFETIME_MS} on a record without a timestamp")
        instants.append(timestamp_ms + lifetime)
    on_expiry = default_on_expiry
    if ON_EXPIRY in seen:
        raw = (seen[ON_EXPIRY] or b"").decode("utf-8", "replace")
        if raw not in ON_EXPIRY_VALUES:
            raise BadInput(BAD, f"{ON_EXPIRY} {raw!r} is not one of {', '.join(ON_EXPIRY_VALUES)}")
        on_expiry = raw
    if not instants:
        return None  # only message-on-expiry: nothing expires
    return Lifetime(min(instants), on_expiry)


def expired_input(lifetime: Lifetime, now_ms: int, hop: str) -> BadInput | None:
    """The reason an expired message is not forwarded (None while it is alive)."""
    if now_ms < lifetime.expires_ms:
        return None
    return BadInput(
        EXPIRED,
        f"lifetime ended {now_ms - lifetime.expires_ms} ms before it reached the {hop} "
        f"(expires at {lifetime.expires_ms}; on expiry: {lifetime.on_expiry})",
    )


def stamped(
    headers: list[tuple[str, bytes | None]] | None, expires_ms: int
) -> list[tuple[str, bytes | None]]:
    """`headers` with `router-expires-at` set to `expires_ms` (replacing an older one)."""
    kept = [(k, v) for k, v in (headers or []) if k != ROUTER_EXPIRES_AT]
    kept.append((ROUTER_EXPIRES_AT, str(expires_ms).encode()))
    return kept


def _number(key: str, raw: bytes | None) -> int:
    text = (raw or b"").decode("ascii", "replace").strip()
    # More digits than any instant has are refused before `int()`, which raises
    # ValueError past 4,300 digits (and would crash the unit, not dead-letter the message).
    if not text.isdigit() or len(text) > MAX_DIGITS:
        raise BadInput(BAD, f"{key} {text[:40]!r} is not a whole number of milliseconds")
    return int(text)
