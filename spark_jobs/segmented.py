"""Reassembly of segmented messages in a complete group (pure, no Spark, no router import).

The contract is `router.contract.segments`'s: a payload too large for one record travels as
*segments*, consecutive members of its group (`segment-id`, `segment-index` from 0,
`segment-last` with `segment-bytes` and `segment-sha256` on the last); an ordinary
message travels as a group of its own whose guarantee ID is its segment ID. When a
group is complete (its members in sequence, checked by `groups`), `assemble` puts each
run of segments back into one message, its length and SHA-256 checked, or says what is
wrong, with the reason codes of `router.receiver.reassembly` (docs/explanation/segments.md):

* `segment-missing`: an index never came, or the message ended without its last segment
  (the next member is not one of its segments);
* `segment-duplicate`: an index came twice;
* `segment-out-of-order`: every index came, not in order;
* `length-mismatch` / `checksum-mismatch`: the bytes differ from `segment-bytes` /
  `segment-sha256`.

A record whose segment headers are malformed (`bad-segment`) never gets here: the
receiver reports it at once (`reading.with_routing`'s `segment_problem`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from spark_jobs.message import Message


@dataclass(frozen=True)
class Broken:
    """A segmented message that cannot be handed over: `reason` (a code), `detail`, its
    segment ID, and the records it was read from."""

    reason: str
    detail: str
    set_id: str
    records: tuple[Message, ...]

    @property
    def text(self) -> str:
        where = self.records[0].where
        return f"{self.reason}: segmented message {self.set_id!r} at {where}: {self.detail}"


def implicit(guarantee_id: str | None, members: Sequence[Message]) -> bool:
    """Whether the group exists only to carry one segmented ordinary message."""
    seg = members[0].segment if members else None
    return seg is not None and guarantee_id == seg.set_id


def assemble(members: Sequence[Message]) -> list[Message] | Broken:
    """A complete group's members (in sequence) with each run of segments put back into
    one message: the first segment's record (offset, seq, creation time), the whole
    payload as `value`, the last segment's `final`, the segment ID as `record_id`, every
    segment's offset in `parts`. The first broken message instead, if any."""
    out: list[Message] = []
    i = 0
    while i < len(members):
        m = members[i]
        if m.segment is None:
            out.append(m)
            i += 1
            continue
        run = [m]
        i += 1
        while not run[-1].segment.last and i < len(members):  # type: ignore[union-attr]
            nxt = members[i].segment
            if nxt is None or nxt.set_id != m.segment.set_id:
                break
            run.append(members[i])
            i += 1
        whole = _whole(run, members[i] if i < len(members) else None)
        if isinstance(whole, Broken):
            return whole
        out.append(whole)
    return out


def _whole(run: list[Message], after: Message | None) -> Message | Broken:
    """One run of segments (`after`: the member that ended it early, if any)."""
    segs = [m.segment for m in run]
    assert all(s is not None for s in segs)
    indexes = [s.index for s in segs]  # type: ignore[union-attr]
    last = segs[-1]
    set_id = run[0].segment.set_id  # type: ignore[union-attr]

    def broken(reason: str, detail: str) -> Broken:
        return Broken(reason, detail, set_id, tuple(run))

    if last is None or not last.last:
        end = f"interrupted at {after.where}" if after is not None else "the group ended"
        return broken("segment-missing", f"its last segment never came ({end})")
    missing = sorted(set(range(max(indexes) + 1)) - set(indexes))
    if missing:
        return broken("segment-missing", f"segment(s) {_ranges(missing)} of {last.index + 1}")
    if len(set(indexes)) != len(indexes):
        twice = next(x for x in indexes if indexes.count(x) > 1)
        return broken("segment-duplicate", f"segment {twice} came twice")
    if indexes != list(range(len(indexes))):
        return broken("segment-out-of-order", f"{len(indexes)} segments, not in index order")
    value = b"".join(m.value for m in run)
    if len(value) != last.total:
        return broken("length-mismatch", f"{len(value)} bytes, segment-bytes says {last.total}")
    if hashlib.sha256(value).hexdigest() != last.sha256:
        return broken("checksum-mismatch", "the bytes' SHA-256 differs from segment-sha256")
    return replace(
        run[0],
        record_id=set_id,
        value=value,
        final=run[-1].final,
        segment=None,
        parts=tuple(m.offset for m in run),
    )


def _ranges(numbers: list[int]) -> str:
    """`[1, 2, 3, 7]` -> `1-3, 7`."""
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out[:10]) + (", ..." if len(out) > 10 else "")
