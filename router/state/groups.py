"""Each group's processing status on the receiving side (pure).

`Receiver(..., state=...)` records, per consumer group, for every group it saw marked
done: the queue and offset of the last member done, its sequence number, and whether that
member was the final (`complete`). It is written to Redis (`router.state.store`) **before**
the offsets are stored for committing, so after a restart the status is never behind the
committed offsets: a message redelivered after a crash whose `seq` is at or below
`last_seq` was processed already, and a group whose status is not `complete` is resumed by
processing its members after `last_seq`.

A member the receiver found expired (`router.receiver.expiry_rules`) is never handed out, so
never marked done, but it moves the status on as far as it goes (`expired`): its offset
and `seq` become the last ones, its `seq` is listed in `expired_seqs` (the gap the
application saw), an expired final completes the group, and an expired member under
`expire-group` stops it (`stopped`: its later members are dead-lettered, never handed out).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """A group as far as the application processed it."""

    gid: str
    queue: str
    partition: int
    offset: int  # of the last member marked done
    last_seq: int | None  # its `guarantee-seq` (None if the group is not numbered)
    complete: bool  # that member was the group's final (done, or expired)
    done_count: int = 1  # members marked done in this opening of the group
    expired: int = 0  # members found expired by the receiver in this opening
    expired_seqs: tuple[int, ...] = ()  # ... the `guarantee-seq` of those that had one
    stopped: bool = False  # an expired member stopped the group (expire-group)

    def __post_init__(self) -> None:
        if not isinstance(self.expired_seqs, tuple):  # read back from JSON: a list
            object.__setattr__(self, "expired_seqs", tuple(self.expired_seqs))

    @property
    def finished(self) -> bool:
        """Nothing more of this opening of the group will be handed out."""
        return self.complete or self.stopped


def advance(
    old: GroupStatus | None,
    gid: str,
    queue: str,
    partition: int,
    offset: int,
    seq: int | None,
    final: bool,
) -> GroupStatus | None:
    """The status once a member is marked done; None if it changes nothing (a member
    redelivered after a restart, at or before the recorded offset). After a complete
    group, a later member under the same ID is a new group: its status starts over."""
    new = GroupStatus(gid, queue, partition, offset, seq, final)
    if old is None:
        return new
    same_queue = (old.queue, old.partition) == (queue, partition)
    if same_queue and offset <= old.offset:
        return None
    if old.finished or not same_queue:
        return new
    return replace(
        new,
        done_count=old.done_count + 1,
        expired=old.expired,
        expired_seqs=old.expired_seqs,
    )


def expired(
    old: GroupStatus | None,
    gid: str,
    queue: str,
    partition: int,
    offset: int,
    seq: int | None,
    final: bool,
    stopped: bool,
) -> GroupStatus | None:
    """The status once a member was found expired (not handed out); None if it changes
    nothing. Behind the recorded offset (a later member was done first), the member is
    only listed, once: the status keeps its place."""
    gap = (seq,) if seq is not None else ()
    new = GroupStatus(gid, queue, partition, offset, seq, final, 0, 1, gap, stopped)
    if old is None:
        return new
    same_queue = (old.queue, old.partition) == (queue, partition)
    if same_queue and offset <= old.offset:
        if seq is None or seq in old.expired_seqs:
            return None
        return replace(old, expired=old.expired + 1, expired_seqs=(*old.expired_seqs, seq))
    if old.finished or not same_queue:
        return new
    return replace(
        new,
        done_count=old.done_count,
        expired=old.expired + 1,
        expired_seqs=(*old.expired_seqs, *gap),
    )
