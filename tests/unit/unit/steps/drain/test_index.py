"""The drain step's index of room partitions (pure: fake messages, no broker)."""

from __future__ import annotations

from typing import Any

from router import contract
from router.topology.cells import room_partition
from router.unit.steps.drain.index import RoomIndex
from tests.fixtures.fakes import msg

ROOM = "t.room.send"


def parked(offset: int, gid: str, source: str, *, final: bool = False, bad: str = "") -> Any:
    room_headers: list[tuple[str, bytes | None]] = [
        (contract.ROOM, gid.encode()),
        (contract.TOKEN, source.encode()),
    ]
    if bad:
        room_headers.append((contract.BAD, bad.encode()))
    return msg(offset, gid, final=final, topic=ROOM, extra=room_headers)


def marker(offset: int, gid: str, through: int) -> Any:
    headers: list[tuple[str, bytes | None]] = [
        (contract.CONTROL, contract.DRAINED),
        (contract.ROOM, gid.encode()),
        (contract.THROUGH, str(through).encode()),
    ]
    return msg(offset, topic=ROOM, headers=headers, value=None)


def test_records_are_indexed_per_group_in_order_and_a_marker_drops_what_it_covers() -> None:
    index = RoomIndex()
    tp = (ROOM, 0)
    for m in [parked(0, "B", "in/0/7"), parked(1, "C", "in/0/8"), parked(2, "B", "in/0/9")]:
        assert index.add(m) is False
    assert [p.token for p in index.groups[tp]["B"]] == ["in/0/7", "in/0/9"]
    assert index.low_mark(tp, 3) == 0
    assert index.add(marker(3, "B", 2)) is True and index.last_marked == "B"
    assert set(index.groups[tp]) == {"C"} and index.low_mark(tp, 4) == 1
    # Read again after a rewind: nothing is indexed twice, nothing drained comes back.
    assert index.add(parked(2, "B", "in/0/9")) is False
    assert "B" not in index.groups[tp]


def test_records_up_to_a_known_drain_mark_are_not_indexed() -> None:
    index = RoomIndex()
    index.mark((ROOM, 0), "B", 2)  # drained through offset 2 (a marker read earlier)
    index.add(parked(1, "B", "in/0/8"))
    index.add(parked(4, "B", "in/0/9"))
    assert [p.m.offset() for p in index.groups[(ROOM, 0)]["B"]] == [4]


def test_a_bad_parked_record_keeps_its_reason_its_final_flag_and_its_source() -> None:
    index = RoomIndex()
    index.add(parked(0, "B", "in/2/41", final=False, bad="bad-ttl|1|ttl 'soon' is no number"))
    (p,) = index.groups[(ROOM, 0)]["B"]
    assert p.bad is not None and p.final  # the table was told it was the group's final
    assert (p.bad.code, p.bad.detail, p.bad.guarantee_id) == (
        "bad-ttl",
        "ttl 'soon' is no number",
        "B",
    )
    assert p.source() == ("in", 2, 41)
    assert all(k not in contract.ROOM_HEADERS for k, _ in p.headers())
    assert (contract.GUARANTEE_ID, b"B") in p.headers()


def test_a_good_record_is_not_bad_and_an_odd_token_reports_no_source() -> None:
    index = RoomIndex()
    index.add(parked(0, "B", "garbage", final=True))
    (p,) = index.groups[(ROOM, 0)]["B"]
    assert p.bad is None and p.final and p.source() is None


def test_a_group_always_parks_on_one_partition() -> None:
    assert {room_partition("order-17", 4) for _ in range(3)} == {room_partition("order-17", 4)}
    assert {room_partition(f"g{i}", 4) for i in range(100)} == {0, 1, 2, 3}


def test_a_parked_close_marker_is_a_close_and_a_senders_control_header_is_no_marker() -> None:
    index = RoomIndex()
    close = parked(0, "B", "t.transfer/0/12", final=True)
    close.headers_.append((contract.CONTROL, contract.CLOSE))
    index.add(close)
    forged = parked(1, "C", "in/0/3", bad="bad-headers|0|header 'router-control' is reserved")
    forged.headers_.append((contract.CONTROL, contract.DRAINED))
    assert index.add(forged) is False  # parked (to be dead-lettered), not a drain marker
    (b,) = index.groups[(ROOM, 0)]["B"]
    (c,) = index.groups[(ROOM, 0)]["C"]
    assert b.close and b.final and b.bad is None
    assert not c.close and c.bad is not None and c.bad.code == "bad-headers"
