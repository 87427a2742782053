"""What `Sender.send` returns and raises, and its open groups' lanes and numbers (pure).

A send's routing headers are read by `router.contract.request`. A `guarantee-seq` that is
not the number the group expects is an InvalidRequest here: a caller's own number must be, in
the default lane order, the group's next number in this sender (0 for a group this sender
has not opened); in logical order (`guarantee-order: logical`, or the router's
`routing.default_order`), any number this sender has not sent in the group yet, since
several senders may each send a part of one group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from router import contract
from router.contract.request import Request
from router.errors import InvalidRequest, RouterError

TP = tuple[str, int]


class DeliveryFailed(RouterError):
    """Messages Kafka did not acknowledge; they were not sent."""

    def __init__(self, failures: Sequence[str]) -> None:
        super().__init__(f"{len(failures)} messages not delivered: {'; '.join(failures[:5])}")
        self.failures = list(failures)


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """Where `Sender.send` put a message: its send-queue partition and its number in its
    group (None for an ordinary message). A segmented message (`router.contract.segments`) took
    `segments` numbers from `seq` on, and has the ID `segment_id`."""

    topic: str
    partition: int
    seq: int | None
    segments: int = 1
    segment_id: str | None = None


@dataclass
class OpenGroup:
    """One open group: its partition, next number and last use (`time.monotonic()`)."""

    tp: TP  # the send-queue partition the group is pinned to
    next_seq: int
    last_used: float
    logical: bool = False
    sent: set[int] = field(default_factory=set)  # logical order: the numbers sent
    opened: float = 0.0  # `time.monotonic()` when this sender opened (or resumed) it


class OpenGroups:
    """This sender's open groups: each one's partition and next sequence number. A group
    idle longer than `max_idle_s` (the longest TTL: the router has forgotten it) is
    forgotten once more than `limit` groups are open."""

    def __init__(self, max_idle_s: float, limit: int = 10_000) -> None:
        self.max_idle_s = max_idle_s
        self.limit = limit
        self._open: dict[str, OpenGroup] = {}

    def place(self, r: Request, now: float, new_lane: Callable[[], TP]) -> tuple[TP, int]:
        """The partition and sequence number of grouped message `r` (`new_lane()` picks a
        partition for a group not open yet). InvalidRequest, with nothing changed, if the
        caller's number is not one the group can take."""
        gid = r.guarantee_id
        assert gid is not None, "an ordinary message has no group"
        group = self._open.get(gid)
        logical = r.logical or (group is not None and group.logical)
        expected = group.next_seq if group is not None else 0
        seq = r.seq if r.seq is not None else expected
        if logical:
            if group is not None and seq in group.sent:
                raise InvalidRequest(
                    f"{contract.SEQ} {seq} of group {gid!r} was already sent by this sender"
                )
        elif seq != expected:
            state = "is open" if group is not None else "is not open in this sender"
            raise InvalidRequest(
                f"{contract.SEQ} {seq} for group {gid!r}, which {state}: its next number "
                f"is {expected} (lane order numbers a group 0, 1, 2, ... as sent)"
            )
        if group is None:
            group = self._open[gid] = OpenGroup(new_lane(), 0, now, logical, opened=now)
        group.logical = logical
        if logical:
            group.sent.add(seq)
        group.next_seq = max(group.next_seq, seq + 1)
        group.last_used = now
        if r.final:
            del self._open[gid]
        elif len(self._open) > self.limit:
            self._forget_idle(now)
        return group.tp, seq

    def _forget_idle(self, now: float) -> None:
        idle = [g for g, o in self._open.items() if now - o.last_used > self.max_idle_s]
        for g in idle:
            del self._open[g]

    def lanes(self) -> dict[str, TP]:
        """Each open group's partition."""
        return {g: o.tp for g, o in self._open.items()}

    def __contains__(self, gid: object) -> bool:
        return gid in self._open

    def groups(self) -> dict[str, OpenGroup]:
        """The open groups (read only)."""
        return dict(self._open)

    def restore(
        self, gid: str, tp: TP, next_seq: int, now: float, logical: bool, sent: set[int]
    ) -> None:
        """Open a group again as a restarted sender found it: on `tp`, numbered on from
        `next_seq` (`sent`: the numbers already on its lane, for logical order)."""
        self._open[gid] = OpenGroup(tp, next_seq, now, logical, set(sent), opened=now)

    def drop(self, gid: str) -> bool:
        """Forget a group (abandoned, or its opening failed); whether it was open."""
        return self._open.pop(gid, None) is not None
