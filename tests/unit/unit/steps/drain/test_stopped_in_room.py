"""A group stopped (policy stop-group) while admitted to a destination: the routing unit parks
the poison message behind the others, and the drain alone closes the group on its
destination, after what it forwarded (pure harness: the model table, fake room records)."""

from __future__ import annotations

from router import contract
from router.table import room
from router.table.routing import STOPPED
from router.unit.steps.bands import BandStep
from router.unit.steps.emit.records import Output
from tests.fixtures.fakes import msg
from tests.fixtures.roomharness import STRICT, Side

BAND_1 = [("router-band", b"1")]
LOGICAL = [(contract.ORDER, b"logical")]
POISON = (contract.SEQ, b"x")  # a bad member under policy stop-group (STRICT)


def drain(s: Side, now: int, bands: BandStep | None = None) -> Output:
    batch, out = s.drain_batch(now)
    if bands is not None:
        bands.retarget(out)
    s.drain.settle(batch)
    s.model.settle(batch.id, [], [*out.finals, *((g, STOPPED) for g in out.stopped)], out.drains)
    return out


def written(out: Output) -> list[tuple[str, bytes | None, bytes | None]]:
    return [
        (r.topic, r.value, dict(r.headers).get(contract.CONTROL))
        for r in out.records
        if "transfer" in r.topic
    ]


def test_the_close_marker_follows_the_group_to_its_band_topic() -> None:
    s = Side(["0"])
    bands = BandStep(2, ["in"], ["t.transfer"], None)
    s.route(1, msg(0, "B", seq=0, extra=STRICT))  # B holds the destination
    s.route(2, msg(1, "A", seq=0, extra=[*STRICT, *BAND_1]))  # A waits, band 1
    s.route(3, msg(2, "B", seq=1, final=True, extra=STRICT))  # B ends: A is admitted
    first = written(drain(s, 4, bands))  # A's first member, on its band's topic
    assert [(t, c) for t, _, c in first] == [("t.transfer.p1", None)]
    assert s.model.entries["A"].state == room.ADMITTED
    s.route(5, msg(3, "A", seq=1, extra=[*STRICT, *BAND_1]))
    assert s.route(6, msg(4, "A", extra=[*STRICT, *BAND_1, POISON])) == [room.WAIT]
    assert s.model.entries["A"].closing == STOPPED and s.model.entries["A"].dest == "0"
    out = drain(s, 7, bands)
    assert written(out) == [("t.transfer.p1", None, contract.CLOSE)]
    assert out.stopped == ["A"] and s.model.load == {}


def test_a_logical_group_is_not_closed_before_a_member_routed_straight_commits() -> None:
    s = Side(["0"])
    s.route(1, msg(0, "G", seq=0, extra=[*STRICT, *LOGICAL]))
    s.route(2, msg(1, "G", seq=1, extra=[*STRICT, *LOGICAL]), commit=False)  # in flight
    assert s.route(3, msg(0, "G", seq=5, partition=1, extra=[*STRICT, *LOGICAL])) == [room.WAIT]
    assert s.route(4, msg(1, "G", partition=1, extra=[*STRICT, *LOGICAL, POISON])) == [room.WAIT]
    assert s.model.entries["G"].state == room.ADMITTED and s.model.entries["G"].fence
    out = drain(s, 5)
    assert written(out) == [] and out.stopped == [] and s.model.load == {"0": 1}


def test_the_replay_of_an_aborted_stop_closes_the_group_again() -> None:
    """An open group's stop rode in a transaction that aborted: the table kept the stop, and
    the replay must write the close marker again, or the group is never closed downstream
    while the settle frees its destination."""
    s = Side(["0"])
    s.route(1, msg(0, "G", seq=0, extra=STRICT))
    poison = msg(1, "G", extra=[*STRICT, POISON])
    assert s.route(2, poison, commit=False) == ["!P0"]  # aborted
    committed: list[list[tuple[str, bytes | None, bytes | None]]] = []
    append = s._append

    def spy(out: Output, commit: bool) -> None:
        if commit:
            committed.append(written(out))
        append(out, commit)

    s._append = spy  # type: ignore[method-assign]
    assert s.route(3, poison) == ["!P0"]  # the replay
    assert committed == [[("t.transfer", None, contract.CLOSE)]]
