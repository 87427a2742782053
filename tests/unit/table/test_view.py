"""`router table show` as text and JSON, from entries built without servers."""

from __future__ import annotations

from router.table.routing import Entry
from router.table.store.codec import decode_entry
from router.table.view import show_lines, view


def entry(next_seq: int) -> Entry:
    e = Entry("2", opened_ms=1_000, updated_ms=3_000, ttl_ms=60_000, lane="q/0")
    e.next = next_seq
    return e


def test_a_logical_group_shows_the_last_sequence_number_routed() -> None:
    v = view("send", "G", entry(4), now_ms=5_000)
    assert v.seq_routed == 3 and v.as_json()["seq_routed"] == 3
    (line,) = show_lines("send", "G", v)
    assert line.startswith("send: open on 2, lane q/0, age 4.0 s, idle 2.0 s")
    assert line.endswith(", last seq routed 3")
    first = view("send", "G", entry(0), now_ms=5_000)
    assert first.seq_routed == -1 and show_lines("send", "G", first)[0].endswith("routed -1")


def test_a_lane_order_group_has_no_sequence_number_in_the_table() -> None:
    v = view("receive", "G", entry(-1), now_ms=5_000)
    assert v.seq_routed is None and v.as_json()["seq_routed"] is None
    assert "seq" not in show_lines("receive", "G", v)[0]


def test_a_lane_order_group_shows_the_number_its_last_routed_member_carried() -> None:
    e = entry(-1)
    e.routed = 7
    v = view("send", "G", e, now_ms=5_000)
    assert v.seq_routed == 7 and v.as_json()["seq_routed"] == 7
    assert show_lines("send", "G", v)[0].endswith(", parked 0, last seq routed 7")
    e.routed = 0  # the first member: a number, not none
    assert view("receive", "G", e, now_ms=5_000).seq_routed == 0


def test_logical_order_reads_its_next_number_whatever_the_entry_recorded() -> None:
    e = entry(4)
    e.routed = 9  # a lane-order member of a logical group: next still decides
    assert view("send", "G", e, now_ms=5_000).seq_routed == 3


def test_a_lane_order_entry_read_from_redis_shows_its_number() -> None:
    v = view("send", "G", decode_entry("2|1000|3000|60000||q/0|open|0|-1|||12"), now_ms=5_000)
    assert v.seq_routed == 12 and v.state == "open" and v.lane == "q/0"
    old = view("send", "G", decode_entry("2|1000|3000|60000||q/0"), now_ms=5_000)
    assert old.seq_routed is None
