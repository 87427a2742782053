"""Priority bands (pure, no I/O): the `message-priority` header, its bands and their topics.

A message's priority is the header `message-priority`, an integer 0..9 (9 the highest;
none: `DEFAULT_PRIORITY`, 0). A topology with `priority.bands` = N > 1 has N lanes per
hop: band 0 is the topic itself, band b > 0 the topic `<topic>.p<b>` (send queues, the
transfer topic, receive queues; `band_topic`). Priority p falls in band `p * N // 10`, so
with 3 bands: 0-3 -> band 0, 4-6 -> band 1, 7-9 -> band 2.

The send unit decides a message's band once and writes it in the header `router-band` on
everything it forwards; later hops read that header, never the priority again:

* a message on a band send queue `<queue>.p<b>` is in band b (its header is not read for
  the band: a plain producer that wants its backlog overtaken writes there);
* an ordinary message on a send queue itself is in its header's band;
* a group keeps the band of its first member the router sees (`router.unit.steps.bands`): later
  members' headers are ignored, so priority never reorders a group.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from router.contract.headers import BadInput
from router.errors import InvalidRequest

PRIORITY = "message-priority"
BAND = "router-band"  # the band the send unit decided: every later hop reads this
DEFAULT_PRIORITY = 0
MAX_PRIORITY = 9
MAX_BANDS = MAX_PRIORITY + 1

Headers = Sequence[tuple[str, bytes | None]]

_BAND_SUFFIX = re.compile(r"^(.*)\.p([1-9])$")


def read(headers: Headers | None) -> int | None:
    """The message's priority header (0..9), None if it has none. Raises
    BadInput(`bad-priority`) for a header that is not one digit 0..9, or given twice."""
    found: int | None = None
    for key, value in headers or ():
        if key != PRIORITY:
            continue
        if found is not None:
            raise BadInput("bad-priority", f"header {PRIORITY!r} given more than once")
        text = (value or b"").strip()
        if len(text) != 1 or not text.isdigit():
            shown = text[:20].decode("utf-8", "replace")
            raise BadInput(
                "bad-priority",
                f"header {PRIORITY!r} must be one digit 0..{MAX_PRIORITY}, not {shown!r}",
            )
        found = int(text)
    return found


def band_of(priority: int | None, bands: int) -> int:
    """The band (0 = lowest, the topic itself) a priority falls in, out of `bands`."""
    if not 1 <= bands <= MAX_BANDS:
        raise InvalidRequest(f"bands must be 1..{MAX_BANDS}, not {bands}")
    p = DEFAULT_PRIORITY if priority is None else priority
    if not 0 <= p <= MAX_PRIORITY:
        raise InvalidRequest(f"priority must be 0..{MAX_PRIORITY}, not {p}")
    return p * bands // MAX_BANDS


def band_topic(topic: str, band: int) -> str:
    """The topic of `band` for a base topic: the topic itself for band 0."""
    if not 0 <= band < MAX_BANDS:
        raise InvalidRequest(f"band must be 0..{MAX_BANDS - 1}, not {band}")
    return topic if band == 0 else f"{topic}.p{band}"


def band_topics(topic: str, bands: int) -> list[str]:
    """Every band's topic of a base topic, lowest band first."""
    return [band_topic(topic, b) for b in range(bands)]


def split(topic: str, bases: Iterable[str]) -> tuple[str, int]:
    """(base topic, band) of a topic that is one of `bases` or one of their band topics;
    a topic that is neither is its own base, band 0."""
    base_set = bases if isinstance(bases, (set, frozenset)) else set(bases)
    if topic in base_set:
        return topic, 0
    match = _BAND_SUFFIX.match(topic)
    if match and match.group(1) in base_set:
        return match.group(1), int(match.group(2))
    return topic, 0


def stamped_band(headers: Headers | None) -> int:
    """The band the send unit wrote on a record (`router-band`); 0 if none or unreadable
    (only the router writes it, after checking)."""
    for key, value in headers or ():
        if key == BAND:
            text = (value or b"").strip()
            if len(text) == 1 and text.isdigit():
                return int(text)
            return 0
    return 0


def stamp(headers: Headers | None, band: int) -> list[tuple[str, bytes | None]]:
    """`headers` with `router-band` set to `band` (an incoming one is replaced: only the
    router decides a band)."""
    out = [h for h in headers or () if h[0] != BAND]
    out.append((BAND, str(band).encode()))
    return out


def header(priority: int) -> tuple[str, bytes]:
    """The priority header, for any producer (checked)."""
    if not 0 <= priority <= MAX_PRIORITY:
        raise InvalidRequest(f"priority must be 0..{MAX_PRIORITY}, not {priority}")
    return (PRIORITY, str(priority).encode())


def bands_in(topics: Collection[str], base: str) -> int:
    """How many bands a topology has, from the topics that exist: `base`, `base.p1`, ..."""
    n = 1
    while n < MAX_BANDS and band_topic(base, n) in topics:
        n += 1
    return n


def lane(tp: tuple[str, int], band: int) -> tuple[str, int]:
    """A send-queue partition's twin in `band` (the same partition of `<queue>.p<band>`)."""
    return band_topic(tp[0], band), tp[1]


def sender_band(
    given: int | None, headers: Sequence[tuple[str, str | bytes | None]], bands: int
) -> tuple[int, list[tuple[str, bytes]]]:
    """A library sender's message: its band, from `priority=` or from the caller's own
    `message-priority` header (not both), and the header to add. InvalidRequest if malformed."""
    own = [(k, v.encode() if isinstance(v, str) else v) for k, v in headers if k == PRIORITY]
    if given is not None and own:
        raise InvalidRequest(f"give the priority once: priority={given} and a {PRIORITY!r} header")
    if given is not None:
        return band_of(given, bands), [header(given)]
    try:
        return band_of(read(own), bands), []
    except BadInput as bad:
        raise InvalidRequest(bad.detail) from None
