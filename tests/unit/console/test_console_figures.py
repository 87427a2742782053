"""The cards at the top of each side of the console and their plots
(`router.console.figures`), over a few refreshes, without servers."""

from __future__ import annotations

from router.console import figures
from router.console.history import History
from router.console.snapshot import Sample, SideSnapshot, rates
from router.table.view import EntryView


def entry(gid: str, dest: str, state: str = "open") -> EntryView:
    return EntryView("send", gid, dest, state, "q/0", 1.0, 0.5, 300.0, 299.0, 0, "", None, None)


def snap(now_ms: int, waiting: int) -> SideSnapshot:
    room = {f"w{i}": 1_000 * i for i in range(waiting)}  # w0 waits longest
    entries = [entry("A", "0"), entry("C", "1"), entry("S", "!", "staged")]
    entries += [entry(g, "!", "waiting") for g in room]
    return SideSnapshot("send", ("0", "1"), entries, [], {"swept": 1}, room, {}, now_ms)


def sample(at: float, out: int, dead: int) -> Sample:
    return Sample(
        at,
        {
            "send-unit:h-1": {
                "messages_in": out,
                "messages_out": out,
                "dead_letters": dead,
                "source_lag": 40,
                "expired": 2,
            },
            "send-relay:h-2": {"source_lag": 2},
            "receive-unit:h-3": {"dead_letters": 100, "source_lag": 1_000},
            "sweeper:h-4": {"wait_timeouts": 9},
        },
    )


def test_roles_belong_to_their_side() -> None:
    assert figures.side_of("send-unit") == figures.side_of("send-relay") == "send"
    assert figures.side_of("receive-unit") == "receive"
    assert figures.side_of("sweeper") is None


def test_cards_count_the_side_and_plot_its_history() -> None:
    history = History()
    prev = None
    for i in range(4):  # four refreshes, 2 s apart: the room grows, dead letters come
        cur = sample(100.0 + 2 * i, out=100 * i, dead=3 * i)
        s = snap(now_ms=20_000 + 2_000 * i, waiting=10 + i)
        throughput = rates(prev, cur)
        history.add(cur.at, figures.point([s], cur, throughput))
        prev = cur
    values = figures.side_values(s, cur, throughput)
    assert values["open"] == 2 and values["waiting"] == 13 and values["staged"] == 1
    assert values["oldest"] == 26.0  # w0 since 0 ms, read at 26,000 ms
    assert values["p50"] == 20.0 and values["p90"] == 25.0
    assert values["out"] == 50.0 and values["lag"] == 42.0  # send-unit and send-relay
    assert values["dead_letters"] == 9.0  # the receive side's are not the send side's
    assert values["expiries"] == 1 + 2  # the table's swept, the units' expired
    cards = {c["id"]: c for c in figures.side_cards(s, values, history, cur.at)}
    assert list(cards) == [
        "open", "waiting", "oldest", "staged", "dead_letters", "expiries", "throughput", "lag"
    ]  # fmt: skip
    assert cards["open"]["detail"] == "0: 1, 1: 1"
    assert cards["oldest"]["text"] == "26 s"
    assert cards["oldest"]["detail"] == "p50 20 s, p90 25 s"
    assert cards["dead_letters"]["value"] == 9.0  # 0 -> 9 over the points kept
    assert cards["dead_letters"]["detail"] == "last 6 s; 9 in all"
    assert cards["throughput"]["text"] == "50.0/s"
    assert cards["waiting"]["lines"]["waiting"] == [[-6.0, 10.0], [-4.0, 11.0], [-2.0, 12.0],
                                                    [0.0, 13.0]]  # fmt: skip
    assert set(cards["oldest"]["lines"]) == {"oldest", "p90", "p50"}
    assert len(cards["throughput"]["lines"]["out"]) == 3  # unknown at the first refresh
    roles = figures.role_lines({"send-unit": {}}, history, cur.at)
    assert [p[1] for p in roles["send-unit"]["out"]] == [50.0, 50.0, 50.0]


def test_unknown_figures_print_as_a_dash() -> None:
    assert figures.number(None) == figures.seconds(None) == "\u2013"
    assert figures.number(12345.0) == "12,345" and figures.number(2.25, 1) == "2.2"
    assert figures.seconds(3.21) == "3.2 s" and figures.seconds(41.6) == "42 s"
