"""What the drivers print (ops/harness/console.py): plain text off a terminal, with
progress lines at a bounded rate, and rich on one; summaries byte-exact in plain text."""

from __future__ import annotations

import io
from collections import Counter

from ops.harness.console import (
    Column,
    Console,
    Row,
    markdown_table,
    plain_table,
    summary_lines,
)
from ops.harness.scenarios import chaos_result as chaos
from ops.harness.scenarios import demo_run as demo
from ops.harness.verdict.capacity import SideReport
from ops.harness.verdict.verify import Report


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_the_console_writes_plain_lines() -> None:
    out = io.StringIO()
    console = Console(out)
    assert not console.is_terminal
    console.say("hello [bold]world[/bold]")  # no markup: written as it is
    assert out.getvalue() == "hello [bold]world[/bold]\n"
    assert not Console(io.StringIO(), force_terminal=False).is_terminal
    assert Console(io.StringIO(), force_terminal=True).is_terminal


def test_a_line_callback_makes_a_plain_console() -> None:
    lines: list[str] = []
    console = Console.of(lines.append)
    assert not console.is_terminal
    console.say("one")
    console("two")  # a Console is a `say` callback too
    assert Console.of(console) is console
    assert lines == ["one", "two"]


def test_plain_progress_prints_at_most_one_line_per_interval_and_the_final_one() -> None:
    lines: list[str] = []
    clock = Clock()
    console = Console(say=lines.append, interval=5.0, clock=clock)
    with console.progress("sent", 1200) as bar:
        for i in range(1, 13):  # 12 s, 100 messages a second
            clock.now += 1
            bar.update(i * 100, f"received {i * 50}")
    # the first update at once, then every 5 s (at 6 and 11 s), then the final state
    assert lines == [
        "   sent     100/1200   8%   received 50   (100 msg/s, ETA 11 s)",
        "   sent     600/1200  50%   received 300   (100 msg/s, ETA 6 s)",
        "   sent    1100/1200  92%   received 550   (100 msg/s, ETA 1 s)",
        "   sent    1200/1200 100%   received 600   (100 msg/s, 12.0 s)",
    ]


def test_plain_progress_does_not_repeat_a_final_state_already_printed() -> None:
    lines: list[str] = []
    clock = Clock()
    with Console(say=lines.append, clock=clock).progress("steps", None, unit="step") as bar:
        clock.now += 2
        bar.update(4)
    assert lines == ["   steps       4   (2 step/s, 2.0 s)"]


def test_progress_can_leave_plain_text_to_the_drivers_own_lines() -> None:
    lines: list[str] = []
    with Console(say=lines.append).progress("bench", 10, plain=False) as bar:
        bar.update(5)
    assert lines == []


def test_on_a_terminal_progress_is_a_rich_bar() -> None:
    out = io.StringIO()
    console = Console(out, force_terminal=True)
    with console.progress("sent", 10) as bar:
        console.say("a line above the bar")
        bar.update(10, "received 10")
    text = out.getvalue()
    assert "a line above the bar" in text
    assert "10/10" in text and "received 10" in text
    assert "\x1b[" in text  # drawn, not plain


ROWS = [["send unit", "1", "24,674"], ["whole path", "2", "15,069"]]
COLUMNS = [Column("stage"), Column("processes", "right"), Column("msg/s", "right")]


def test_a_plain_table_is_aligned_text() -> None:
    assert plain_table(COLUMNS, ROWS, title="Throughput") == [
        "Throughput",
        "stage       processes   msg/s",
        "----------  ---------  ------",
        "send unit           1  24,674",
        "whole path          2  15,069",
    ]
    out = io.StringIO()
    Console(out).table(COLUMNS, ROWS, title="Throughput")
    assert out.getvalue().splitlines() == plain_table(COLUMNS, ROWS, title="Throughput")


def test_on_a_terminal_a_table_is_drawn_by_rich() -> None:
    out = io.StringIO()
    Console(out, force_terminal=True).table(COLUMNS, ROWS, title="Throughput")
    text = out.getvalue()
    assert "Throughput" in text and "whole path" in text and "15,069" in text
    assert "─" in text  # rich's rule under the header
    assert text.splitlines() != plain_table(COLUMNS, ROWS, title="Throughput")


def test_markdown_table() -> None:
    assert markdown_table(COLUMNS, [["a", "1", ""]]) == [
        "| stage | processes | msg/s |",
        "|---|---:|---:|",
        "| a | 1 |  |",
    ]


def test_summary_rows_keep_the_plain_lines_exact() -> None:
    items = [
        "Summary",
        Row("lost", "0"),
        Row("messages sent", "6000", "(acknowledged by Kafka)"),
        Row("interleaved, send", "4", "allowed 4", width=21),
        "RESULT: PASS - nothing lost",
    ]
    assert summary_lines(items, 22) == [
        "Summary",
        "  lost                          0",
        "  messages sent              6000   (acknowledged by Kafka)",
        "  interleaved, send            4   allowed 4",
        "RESULT: PASS - nothing lost",
    ]
    out = io.StringIO()
    Console(out).summary(items, 22)
    assert out.getvalue().splitlines() == summary_lines(items, 22)
    out = io.StringIO()
    Console(out, force_terminal=True).summary(items, 22)
    text = out.getvalue()
    assert "Summary" in text and "messages sent" in text and "RESULT: PASS" in text


def demo_result(report: Report) -> demo.DemoResult:
    return demo.DemoResult(
        report,
        seconds=10.0,
        shared={"send": 2},
        round_trips_per_message={"send-unit": 0.004},
        latencies_ms=[10.0, 20.0],
        exit_codes={"send-unit-1": 0},
        sender_failures=[],
        undecodable=0,
        senders="4 senders",
    )


def test_the_demo_summary_text_is_unchanged() -> None:
    r = Report(sent=6000, received=6000, groups_sent=300, groups_complete=300, queues_used=16)
    r.send = SideReport("send", destinations=8, interleaved=3, allowed=3)
    r.receive = SideReport("receive", destinations=16)
    lines = demo.summary(demo_result(r))
    assert lines[:3] == [
        "Summary",
        "  messages sent              6000   (acknowledged by Kafka, 4 senders)",
        "  messages received          6000   (read_committed, 16 receive queues)",
    ]
    assert lines[9:12] == [
        "  interleaved, send            3   allowed 3, disallowed 0 (capacity rule over 8 "
        "destinations, release slack 200 ms)",
        "  interleaved, receive         0   allowed 0, disallowed 0 (capacity rule over 16 "
        "destinations, release slack 200 ms)",
        "  busy shares (router)  send 2, receive 0   (the router's own counters, never part "
        "of the verdict)",
    ]
    assert lines[-1].startswith("RESULT: PASS - every group reached one receive queue, in order;")


def test_the_chaos_summary_text_is_unchanged() -> None:
    r = Report(sent=20000, received=20000, lost=1)
    result = chaos.ChaosResult(r, Counter({"SIGKILL from outside": 12}), {"kafka": 1}, 95.25)
    lines = chaos.summary(result)
    assert lines[1] == "  sent                     20000   (acknowledged by Kafka)"
    assert "  unit deaths                 12   SIGKILL from outside: 12" in lines
    assert "  server restarts      broker 1, Redis 0" in lines
    assert "  duration                  95.2 s" in lines
    assert lines[-1] == "RESULT: FAIL - lost=1"
