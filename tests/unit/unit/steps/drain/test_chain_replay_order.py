"""A chain whose batch aborted, drained again by the room partition's next owner
(`router.unit.steps.drain.step`): the groups chained behind a head stay admitted to its
destination, and the next drain must write the head's rest first.

Found by a streamed chaos run under `wait` (send side, 23 interleavings): a group drained in
part (its final not parked yet), then its rest and final parked; a drain batch forwarded
that rest, chained a lane's ordinary messages and whole groups behind it, and its unit was
SIGKILLed before the commit. The next owner rebuilt its index from the room's low mark:
the head's drained records are followed by its drain marker, which takes the group out of
the index and puts it back behind the others once its rest is read, so the drain wrote the
chained ones first and the head's rest after them, inside the head's span."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from router.unit.steps.drain import chaining
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.logical import Review

PARTS = 4  # the default room partitions


def _part(gid: str) -> int:
    return zlib.crc32(gid.encode()) % PARTS


def _named(prefix: str, part: int) -> str:
    """A guarantee ID whose room partition is `part`."""
    return next(f"{prefix}{i}" for i in range(1_000) if _part(f"{prefix}{i}") == part)


def messages() -> Callable[..., FakeMessage]:
    """`m(gid, value, final=False)`: the next message of source partition in/0."""
    offsets = iter(range(1_000))

    def m(gid: str | None, value: str, final: bool = False) -> FakeMessage:
        return msg(next(offsets), gid, final=final, value=value.encode())

    return m


def test_a_head_drained_in_part_is_written_first_when_its_aborted_chain_is_drained_again() -> None:
    lane = "~in/0"  # the ordinary messages of source partition in/0 that wait
    g, w = _named("G", _part(lane)), _named("W", _part(lane))
    side = Review(["0"])
    m = messages()
    now = 1_000
    side.route(now, m("B", "B0"))  # B takes destination 0
    side.route(now, m(g, "G0"), m(g, "G1"))  # G waits, parked
    side.route(now, m(None, "o1"), m(None, "o2"))  # the lane's ordinary messages wait
    side.route(now, m(w, "W0"), m(w, "W1", final=True))  # W waits, whole
    side.route(now, m("B", "B1", final=True))  # B ends: G is admitted to 0
    side.run_drain(now + 1)  # G's first part, not whole: no final yet
    assert [v for _, v in side.delivered] == [b"B0", b"B1", b"G0", b"G1"]
    side.route(now + 2, m(g, "G2"), m(g, "G3", final=True))  # parked behind
    # G is whole now: its rest forwarded, the lane and W chained behind it; aborted
    side.drain_batch(now + 3, commit=False)
    assert side.model.entries[w].state == "admitted" and side.model.entries[w].dest == "0"
    side.rebuild()  # the room partition's next owner, from the committed low marks
    for t in range(5):
        side.run_drain(now + 4 + t)
    got = [v or b"" for _, v in side.delivered]
    assert got[:6] == [b"B0", b"B1", b"G0", b"G1", b"G2", b"G3"], got
    assert sorted(got[6:]) == [b"W0", b"W1", b"o1", b"o2"], got


def test_an_unknown_chain_order_holds_the_destination_and_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two groups drained in part on one destination (the table's rules forbid it): the
    drain writes nothing there, and warns once while it lasts, not at every batch."""
    side = Review(["0"])
    m = messages()
    now = 1_000
    side.route(now, m("B", "B0"))  # B takes destination 0
    side.route(now, m("G", "G0"))  # G waits, parked
    side.route(now, m("B", "B1", final=True))  # B ends: G is admitted to 0
    unsure = {"on": True}
    real = chaining.replay_order

    def replay_order(groups: Any, states: Any) -> Any:
        order, held, _ = real(groups, states)
        return (order, set(groups), ["0"]) if unsure["on"] else (order, held, [])

    monkeypatch.setattr(chaining, "replay_order", replay_order)
    with caplog.at_level(logging.WARNING, logger="router.drain"):
        for t in range(3):
            side.run_drain(now + 1 + t)
    assert [v for _, v in side.delivered] == [b"B0", b"B1"]
    warned = [r for r in caplog.records if "chain's order unknown" in r.getMessage()]
    assert len(warned) == 1, warned
    unsure["on"] = False
    side.run_drain(now + 5)
    assert [v for _, v in side.delivered] == [b"B0", b"B1", b"G0"]
