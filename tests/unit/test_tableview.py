"""`router table show` as text and JSON, from entries built without servers."""

from __future__ import annotations

from router.routing import Entry
from router.tableview import show_lines, view


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
