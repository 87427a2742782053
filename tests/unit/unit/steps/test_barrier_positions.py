"""Where a batch's records must wait for every earlier one to be on the broker
(`router.unit.steps.bands.barriers`, pure): where a group's record and another band topic of
the same destination meet. The broker test is tests/integration/unit/test_band_barriers.py."""

from __future__ import annotations

from router import contract
from router.contract import priority
from router.unit.steps.bands import BandStep, barriers
from router.unit.steps.emit.records import Output, Record


def test_barriers_are_where_a_group_meets_another_band_of_its_destination() -> None:
    d, e = ("q", 0), ("r", 0)
    # a group's final, then an ordinary message on another band: after the final
    assert barriers([(d, 0, True), (d, 1, False)]) == [1]
    # ordinary messages, then a new group's first on another band: after them
    assert barriers([(d, 1, False), (d, 2, False), (d, 0, True)]) == [2]
    # one band, or ordinary messages only, or other destinations: no wait
    assert barriers([(d, 0, True), (d, 0, False), (d, 0, True)]) == []
    assert barriers([(d, 1, False), (d, 0, False), (d, 2, False)]) == []
    assert barriers([(d, 0, True), None, (e, 1, False), (e, 0, False)]) == []
    # after a barrier everything before it is appended: only what follows counts
    assert barriers([(d, 0, True), (d, 1, False), (d, 2, False), (d, 1, True)]) == [1, 3]


def test_retarget_marks_the_barriers() -> None:
    step = BandStep(3, (), ["dest"], None)
    out = Output(
        records=[
            Record(
                "dest",
                0,
                None,
                b"f",
                [(contract.GUARANTEE_ID, b"g"), (contract.FINAL, b"true")],
                0,
                None,
            ),
            Record("room", 1, None, b"parked", [(priority.BAND, b"1")], 0, None),
            Record("dest", 0, None, b"o", [(priority.BAND, b"1")], 0, None),
        ]
    )
    step.retarget(out)
    assert [r.topic for r in out.records] == ["dest", "room", "dest.p1"]
    assert out.barriers == [2]
