"""Each group's processing status on the receiving side (pure).

`Receiver(..., state=...)` records, per consumer group, for every group it saw marked
done: the queue and offset of the last member done, its sequence number, and whether that
member was the final (`complete`). It is written to Redis (`router.statestore`) **before**
the offsets are stored for committing, so after a restart the status is never behind the
committed offsets: a message redelivered after a crash whose `seq` is at or below
`last_seq` was processed already, and a group whose status is not `complete` is resumed by
processing its members after `last_seq`.
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
    complete: bool  # that member was the group's final
    done_count: int = 1  # members marked done in this opening of the group


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
    if old.complete or not same_queue:
        return new
    return replace(new, done_count=old.done_count + 1)
