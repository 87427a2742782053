"""The drain step gives up everything of a room partition it loses (no servers)."""

from __future__ import annotations

from router.topology.cells import room_partition
from router.unit.steps.drain.step import Drain

TOPIC = "t.room.receive"


def gid_on(partition: int, n: int = 0) -> str:
    """The n-th group ID whose parked records go to `partition` (of 4)."""
    found = [g for i in range(200) if room_partition(g := f"g{i}", 4) == partition]
    return found[n]


def test_a_revoked_room_partition_leaves_no_opening_group_behind() -> None:
    """A group this unit drained but had not yet seen open stays in `opening`; once its
    room partition moved to another unit (which reads the drain marker and finishes the
    switch), keeping it made `busy()` true for good: the unit ran an empty transaction
    every IDLE_S, with nothing it could ever do for that group."""
    drain = Drain(None, None, TOPIC, 4, None, None)  # type: ignore[arg-type]
    drain.assign([(TOPIC, p) for p in range(4)])
    mine, gone = gid_on(0), gid_on(1)
    drain.opening |= {mine, gone}
    drain.revoke([(TOPIC, 1), ("t.transfer", 1)])
    assert drain.opening == {mine} and drain.busy()
    drain.revoke([(TOPIC, 0)])
    assert drain.opening == set() and not drain.busy() and drain.owned == {(TOPIC, 2), (TOPIC, 3)}
