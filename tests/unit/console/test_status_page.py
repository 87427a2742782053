"""The status page's data (`router.console.view`), built without servers."""

from __future__ import annotations

from router.console import view as consoleview
from router.console.history import History
from router.console.paging import Query
from router.console.server import page
from router.console.snapshot import Sample, SideSnapshot, rates
from router.console.view import status
from router.table.view import EntryView


def entry(gid: str, dest: str, state: str = "open", age: float = 1.0, parks: int = 0) -> EntryView:
    return EntryView(
        "send", gid, dest, state, "q/0", age, age / 2, 300.0, 299.0, parks, "", None, None
    )


SEND = SideSnapshot(
    side="send",
    destinations=("0", "1"),
    entries=[
        entry("A", "0", age=5.0),
        entry("C", "0", age=9.0),
        entry("B", "!", "waiting", parks=2),
        entry("S", "1", "stopped"),
        entry("X", "7"),  # a destination the side no longer has
    ],
    draining=["1"],
    counters={"messages": 10, "swept": 3, "wait_timeouts": 1},
    room={"B": 1_000, "~q/0": 31_000},
    admitted={},
    now_ms=42_000,
)


def ids(page: dict[str, object]) -> list[str]:
    items = page["items"]
    assert isinstance(items, list)
    return [x if isinstance(x, str) else x["guarantee_id"] for x in items]


def test_groups_are_listed_per_destination_oldest_first_and_by_state() -> None:
    side = consoleview.side_status(SEND)
    dests = {d["name"]: d for d in side["destinations"]}
    assert list(dests) == ["0", "1", "7"]
    assert ids(dests["0"]["groups"]) == ["C", "A"]
    assert dests["0"]["groups"]["caption"] == "2 open groups; showing all"
    assert dests["1"]["draining"] and not dests["0"]["draining"]
    assert ids(side["unplaced"]) == ["B"]
    assert side["unplaced"]["items"][0]["parks"] == 2
    assert side["open_groups"] == 4
    assert side["waiting"]["items"] == [
        {"guarantee_id": "B", "label": "B", "waiting_s": 41.0},
        {"guarantee_id": "~q/0", "label": "(ordinary of q/0)", "waiting_s": 11.0},
    ]
    assert side["waiting"]["caption"] == "2 waiting; oldest 41 s; showing all"
    assert ids(side["stopped"]) == ["S"] and ids(side["staged"]) == []
    assert side["draining"] == ["1"]


def test_lists_are_capped_with_a_count_and_searchable_by_guarantee_id() -> None:
    room = {f"g-{i:05}": 1_000 + i for i in range(2_000)}
    snap = SideSnapshot("send", ("0",), [], [], {}, room, {}, now_ms=42_000)
    waiting = consoleview.side_status(snap)["waiting"]
    assert (waiting["total"], waiting["matched"], len(waiting["items"])) == (2_000, 2_000, 50)
    assert waiting["items"][0]["guarantee_id"] == "g-00000"  # the oldest first
    assert waiting["caption"] == "2,000 waiting; oldest 41 s; showing the 50 oldest"
    found = consoleview.side_status(snap, Query("G-0199"))["waiting"]
    assert ids(found) == [f"g-0199{i}" for i in range(10)]
    assert found["caption"] == "2,000 waiting, 10 matching 'G-0199'; oldest 41 s; showing all 10"


def test_throughput_is_unknown_without_an_earlier_sample() -> None:
    cur = Sample(1.0, {"send-unit:h-1": {"messages_out": 500}})
    assert rates(None, cur) == {"send-unit": {"messages_in": None, "messages_out": None}}
    # the same instant: no time elapsed, nothing to divide by
    assert rates(cur, cur)["send-unit"]["messages_out"] is None


def test_throughput_sums_the_processes_seen_twice_over_elapsed_time() -> None:
    prev = Sample(
        100.0,
        {
            "send-unit:h-1": {"messages_in": 100, "messages_out": 100},
            "send-unit:h-2": {"messages_in": 50, "messages_out": 50},
            "sweeper:h-3": {"swept": 1},
        },
    )
    cur = Sample(
        102.0,
        {
            "send-unit:h-1": {"messages_in": 300, "messages_out": 260},
            "send-unit:h-2": {"messages_in": 10, "messages_out": 10},  # restarted: skipped
            "send-unit:h-4": {"messages_in": 999, "messages_out": 999},  # new: no reading yet
            "receive-unit:h-5": {"messages_in": 7, "messages_out": 7},  # new role
            "sweeper:h-3": {"swept": 2},
        },
    )
    r = rates(prev, cur)
    assert r["send-unit"] == {"messages_in": 100.0, "messages_out": 80.0}
    assert r["receive-unit"] == {"messages_in": None, "messages_out": None}
    assert r["sweeper"] == {"messages_in": 0.0, "messages_out": 0.0}


def test_status_totals_dead_letters_expiries_and_roles() -> None:
    cur = Sample(
        10.0,
        {
            "send-unit:h-1": {"messages_in": 10, "dead_letters": 2, "parked": 1, "source_lag": 7},
            "receive-unit:h-2": {"messages_in": 8, "dead_letters": 1},
            "sweeper:h-3": {"swept": 4, "wait_timeouts": 1},
        },
    )
    doc = status("topo", [SEND], cur, rates(None, cur), History(), 10.0)
    assert doc["topology"] == "topo" and list(doc["sides"]) == ["send"]
    assert doc["dead_letters"]["dead_letters"] == 3 and doc["dead_letters"]["parked"] == 1
    assert doc["expiries"]["table_swept"] == 3
    assert doc["expiries"]["swept"] == 4 and doc["expiries"]["wait_timeouts"] == 1
    assert doc["roles"]["send-unit"]["processes"] == 1
    assert doc["roles"]["send-unit"]["totals"]["dead_letters"] == 2
    assert doc["roles"]["send-unit"]["totals"]["source_lag"] == 7
    assert doc["roles"]["send-unit"]["per_s"]["messages_in"] is None
    cards = {c["id"]: c for c in doc["sides"]["send"]["cards"]}
    assert cards["waiting"]["value"] == 2 and cards["lag"]["text"] == "7"
    assert doc["errors"] == []


def test_the_page_is_a_package_resource_that_polls_the_status() -> None:
    html = page().decode()
    assert "/api/status" in html and "setTimeout(refresh, 2000)" in html
