"""The send side's control records on the transfer topic (pure): what the receive side
needs to know of a group member the send side did not forward.

* `close` — the group ends here without its final being forwarded (a dead-lettered or
  expired final, a stopped group): the receive side releases it.
* `skip` — a member that is not forwarded (dead-lettered under the dead-letter poison
  policy, or expired under `skip`) while its group goes on: the receive side routes it as
  the member it stands for, so a group whose *first* member was skipped still opens there
  (its next member would otherwise be a continuation without an entry, dead-lettered as
  `group-entry-missing`), and forwards nothing.

Both go to the group's transfer partition after everything forwarded of the group before
them, in the same transaction, with no value. A skip marker tells the receive side what the
member would have told it about its group, in case it is the first there (or the last
before a pause): its `guarantee-seq`, its group's TTL, delivery (`complete` or `stream`) and
order (`logical`), as the send side read them; a member read back from the waiting room
has its own headers read again for them."""

from __future__ import annotations

import logging

from router import contract
from router.config.settings import RoutingSettings
from router.contract import priority
from router.unit.steps.batch import Item, where
from router.unit.steps.emit.records import Emitting, Output, Record

log = logging.getLogger("router.emit")


def marker(
    emitter: Emitting, item: Item, dest: str, out: Output, kind: bytes, origin: str = ""
) -> Record:
    """A `kind` (contract.CLOSE or contract.SKIP) marker for `item`'s group on `dest`;
    `origin`: the member's send-queue position, if `item` is not at it (the room)."""
    m, r, bad = item.m, item.routing, item.bad
    if r is None and item.headers:  # a member read back from the room: its own headers
        r = _routing(item.headers, emitter.rules)
    gid = r.guarantee_id if r is not None else bad.guarantee_id if bad else None
    assert gid is not None
    origin = origin or f"{m.topic()}/{m.partition()}/{m.offset()}"
    headers: list[tuple[str, bytes | None]] = [(contract.GUARANTEE_ID, gid.encode())]
    if kind == contract.CLOSE:
        headers.append((contract.FINAL, b"true"))
        log.info("group %r ended without its final at %s: closing it downstream", gid, where(m))
        out.close_markers += 1
    else:
        seq = r.seq if r is not None else bad.seq if bad else None
        if seq is not None:
            headers.append((contract.SEQ, str(seq).encode()))
        # If it opens the group on the receive side, the group is staged or streamed, and
        # numbered or not, as the member would have made it (unknown: the side's default)
        complete = r.complete if r is not None else bad is not None and bad.complete
        if r is not None or complete:
            headers.append((contract.DELIVERY, b"complete" if complete else b"stream"))
        logical = r.logical if r is not None else bad is not None and bad.logical
        if logical and seq is not None:
            headers.append((contract.ORDER, b"logical"))
        out.skip_markers += 1
    headers += [(contract.CONTROL, kind), (contract.ORIGIN, origin.encode())]
    band = priority.stamped_band(item.headers)
    if band:  # a marker follows its group's band (router.unit.steps.bands)
        headers.append((priority.BAND, str(band).encode()))
    if r is not None:
        headers.append((contract.TTL_MS, str(r.ttl_ms).encode()))
    topic, partition = emitter.spec.target(dest)
    return Record(topic, partition, m.key(), None, headers, 0, None)


def _routing(headers: contract.Headers, rules: RoutingSettings) -> contract.Routing | None:
    """The routing headers of a member whose reason to be skipped was not in them (expired,
    oversized, ...); None if they are malformed themselves."""
    try:
        return contract.parse(headers, rules)
    except contract.BadInput:
        return None
