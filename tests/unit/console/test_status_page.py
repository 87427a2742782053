"""The status page's data (`router.console.view`), built without servers."""

from __future__ import annotations

from router.console import view as consoleview
from router.console.server import page
from router.console.view import Sample, SideSnapshot, rates, status
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
    counters={"messages": 10, "swept": 3},
    waiting=["B", "~q/0"],
    admitted={},
)


def test_groups_are_listed_per_destination_oldest_first_and_by_state() -> None:
    side = consoleview.side_status(SEND)
    dests = {d["name"]: d for d in side["destinations"]}
    assert list(dests) == ["0", "1", "7"]
    assert [g["guarantee_id"] for g in dests["0"]["groups"]] == ["C", "A"]
    assert dests["1"]["draining"] and not dests["0"]["draining"]
    assert [g["guarantee_id"] for g in side["unplaced"]] == ["B"]
    assert side["unplaced"][0]["parks"] == 2
    assert side["open_groups"] == 4
    assert side["waiting"] == ["B", "~q/0"]
    assert side["stopped"] == ["S"] and side["staged"] == []
    assert side["draining"] == ["1"]


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
            "send-unit:h-1": {"messages_in": 10, "dead_letters": 2, "parked": 1},
            "receive-unit:h-2": {"messages_in": 8, "dead_letters": 1},
            "sweeper:h-3": {"swept": 4, "wait_timeouts": 1},
        },
    )
    doc = status("topo", [SEND], cur, None)
    assert doc["topology"] == "topo" and list(doc["sides"]) == ["send"]
    assert doc["dead_letters"]["dead_letters"] == 3 and doc["dead_letters"]["parked"] == 1
    assert doc["expiries"]["table_swept"] == 3
    assert doc["expiries"]["swept"] == 4 and doc["expiries"]["wait_timeouts"] == 1
    assert doc["roles"]["send-unit"]["processes"] == 1
    assert doc["roles"]["send-unit"]["totals"]["dead_letters"] == 2
    assert doc["roles"]["send-unit"]["per_s"]["messages_in"] is None
    assert doc["errors"] == []


def test_the_page_is_a_package_resource_that_polls_the_status() -> None:
    html = page().decode()
    assert "/api/status" in html and "setTimeout(refresh, 2000)" in html
