"""Point-to-point and multicast delivery (seed 001's event channel): the headers, read and
checked (pure: no I/O). The table's rule for a copy is `router.table.multicast`.

A message is point-to-point (the default): it reaches one receive queue. With the header
`message-delivery: multicast` it reaches **every** receive queue of the topology, or with
`multicast-queues: q1,q3` as well only the receive queues named there
(docs/explanation/multicast.md):

* The send side routes it like any ordinary message (one clean transfer partition); the
  receive side fans it out: one copy per target queue, all written or parked in the one
  transaction that commits its transfer-partition offset (`router.unit.steps.emit.fanout`).
* Each copy goes straight to a queue in charge of no open group, or waits in the waiting
  room until its queue is (`router.table.multicast`): a copy never lands inside an open
  group's span.
* Bad input, dead-lettered with its reason: a malformed or repeated header
  (`bad-multicast`), a name that is not a receive queue of the topology (`unknown-queue`),
  and a multicast message with a `guarantee-id` (`multicast-in-group`: a group reaches one
  queue; its group's poison policy applies to it like to any bad member).
"""

from __future__ import annotations

from collections.abc import Sequence

from router.contract.headers import BadInput, Headers, Routing
from router.errors import InvalidRequest

DELIVERY = "message-delivery"
QUEUES = "multicast-queues"
HEADERS = frozenset({DELIVERY, QUEUES})
POINT_TO_POINT, MULTICAST = "point-to-point", "multicast"
MODES = (POINT_TO_POINT, MULTICAST)
MAX_QUEUES_BYTES = 65_536  # the header's value; the names must be receive queues anyway


def read(headers: Headers, queues: Sequence[str], r: Routing) -> tuple[str, ...] | None:
    """The target queues of a message (in the topology's order), None if point-to-point.
    BadInput (with the message's group, if it has one) for malformed headers."""
    mode: bytes | None = None
    names: bytes | None = None
    seen: set[str] = set()
    for key, value in headers:
        if key not in HEADERS:
            continue
        if key in seen:
            raise r.bad("bad-multicast", f"header {key!r} appears more than once")
        seen.add(key)
        if key == DELIVERY:
            mode = value or b""
        else:
            names = value or b""
    if mode is not None and mode.decode("utf-8", "replace") not in MODES:
        raise r.bad("bad-multicast", f"{DELIVERY} {mode[:32]!r} is not one of {MODES}")
    multicast = mode == MULTICAST.encode()
    if names is not None and not multicast:
        raise r.bad("bad-multicast", f"{QUEUES} needs {DELIVERY}: {MULTICAST}")
    if not multicast:
        return None
    if r.guarantee_id is not None:
        raise r.bad(
            "multicast-in-group",
            f"a message of group {r.guarantee_id!r} cannot be multicast: a group reaches one "
            "receive queue (send the copies as ordinary messages)",
        )
    if names is None:
        return tuple(queues)
    return tuple(q for q in queues if q in _names(names, queues, r))


def _names(raw: bytes, queues: Sequence[str], r: Routing) -> set[str]:
    if len(raw) > MAX_QUEUES_BYTES:
        raise r.bad("bad-multicast", f"{QUEUES} is {len(raw)} bytes, more than {MAX_QUEUES_BYTES}")
    try:
        names = [n.strip() for n in raw.decode("utf-8").split(",")]
    except UnicodeDecodeError:
        raise r.bad("bad-multicast", f"{QUEUES} is not valid UTF-8") from None
    if not all(names):
        raise r.bad("bad-multicast", f"{QUEUES} {raw[:64]!r} has an empty name")
    if len(set(names)) != len(names):
        raise r.bad("bad-multicast", f"{QUEUES} names a queue twice: {raw[:64]!r}")
    unknown = [n for n in names if n not in queues]
    if unknown:
        shown = ", ".join(repr(n[:64]) for n in unknown[:3])
        raise r.bad(
            "unknown-queue",
            f"{QUEUES} names {len(unknown)} queue(s) that are not receive queues of the "
            f"topology: {shown} (it has {len(queues)}: {', '.join(queues[:5])}"
            f"{', ...' if len(queues) > 5 else ''})",
        )
    return set(names)


def headers(queues: Sequence[str] | None = None) -> list[tuple[str, bytes]]:
    """The headers that make a message multicast: to every receive queue (None), or to the
    receive queues named (for `router.sender.Sender.send(..., headers=...)` or any
    producer)."""
    out = [(DELIVERY, MULTICAST.encode())]
    if queues is not None:
        if not queues or not all(queues) or any("," in q for q in queues):
            raise InvalidRequest(f"multicast queues must be non-empty queue names: {queues!r}")
        out.append((QUEUES, ",".join(queues).encode()))
    return out


def check_send(headers: Sequence[tuple[str, str | bytes | None]], gid: str | None) -> None:
    """What `Sender.send` checks before sending (the queue names are the router's to
    check): InvalidRequest for what the router would dead-letter whatever the topology."""
    given = [
        (k, v.encode() if isinstance(v, str) else v or b"") for k, v in headers if k in HEADERS
    ]
    if not given:
        return
    try:
        read(given, (), Routing(gid, False, 1))
    except BadInput as bad:
        if bad.code != "unknown-queue":  # no topology here: the names are checked there
            raise InvalidRequest(bad.detail) from None
