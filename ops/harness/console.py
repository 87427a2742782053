"""What the drivers print: lines, a progress bar, tables and summaries.

`make demo`, `make chaos`, `make bench` and `make spark-demo` talk through one `Console`.
On a terminal it draws with rich: a live progress bar (counts, rate, ETA) with the
driver's lines scrolling above it, and tables. Anywhere else (CI, pipes, pytest's
capture, a StringIO) it writes plain text: the same lines, a progress line at most every
`interval` seconds plus the final one, and aligned text tables. Summaries in plain text
are the exact lines the tests and the verdict code read.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol, TextIO

from rich import box
from rich.console import Console as RichConsole
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Column:
    header: str
    align: Literal["left", "right"] = "left"


@dataclass(frozen=True)
class Row:
    """One line of a summary; in plain text `  <label, padded to width><value:>9>   <note>`."""

    label: str
    value: str
    note: str = ""
    width: int | None = None  # the label's column, when not the summary's own

    def plain(self, width: int) -> str:
        line = f"  {self.label:<{self.width or width}}{self.value:>9}"
        return f"{line}   {self.note}" if self.note else line


SummaryItem = Row | str


def summary_lines(items: Sequence[SummaryItem], width: int) -> list[str]:
    """A summary as plain lines: rows formatted, free lines (title, examples, the
    RESULT line) as they are."""
    return [i.plain(width) if isinstance(i, Row) else i for i in items]


def plain_table(
    columns: Sequence[Column | str], rows: Sequence[Sequence[str]], title: str | None = None
) -> list[str]:
    """Aligned text: a header, a rule of dashes, one line per row, two spaces between
    columns, no trailing blanks."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    widths = [max([len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(cols)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(w) if c.align == "right" else cell.ljust(w)
            for cell, c, w in zip(cells, cols, widths, strict=True)
        ).rstrip()

    out = [title] if title else []
    out.append(line([c.header for c in cols]))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in rows)
    return out


def markdown_table(columns: Sequence[Column | str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table (what results files hold): right-aligned columns as `---:`."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    return [
        "| " + " | ".join(c.header for c in cols) + " |",
        "|" + "|".join("---:" if c.align == "right" else "---" for c in cols) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


class ProgressTask(Protocol):
    def update(self, completed: int, info: str = "") -> None:
        """Where the work stands: `completed` of the total, and a short free text."""


class _PlainTask:
    """A progress line in plain text, at most every `interval` seconds (the first update
    at once), and the final state when the context ends."""

    def __init__(
        self,
        emit: Callable[[str], None],
        description: str,
        total: int | None,
        unit: str,
        interval: float,
        clock: Callable[[], float],
    ) -> None:
        self._emit, self._clock = emit, clock
        self.description, self.total, self.unit, self.interval = description, total, unit, interval
        self.completed, self.info = 0, ""
        self._started = clock()
        self._last = -math.inf
        self._printed: tuple[int, str] | None = None

    def update(self, completed: int, info: str = "") -> None:
        self.completed, self.info = completed, info
        now = self._clock()
        if now - self._last >= self.interval:
            self._last = now
            self._print(now, final=False)

    def close(self) -> None:
        if self._printed != (self.completed, self.info):
            self._print(self._clock(), final=True)

    def _print(self, now: float, final: bool) -> None:
        elapsed = max(now - self._started, 1e-9)
        rate = self.completed / elapsed
        count = f"{self.completed:>7}"
        if self.total is not None:
            count += f"/{self.total} {self.completed / max(self.total, 1):4.0%}"
        if final or self.total is None:
            when = f"{elapsed:.1f} s"
        elif rate > 0:
            when = f"ETA {max(self.total - self.completed, 0) / rate:.0f} s"
        else:
            when = "ETA ?"
        info = f"   {self.info}" if self.info else ""
        self._emit(f"   {self.description} {count}{info}   ({rate:,.0f} {self.unit}/s, {when})")
        self._printed = (self.completed, self.info)


class _RichTask:
    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress, self._task = progress, task

    def update(self, completed: int, info: str = "") -> None:
        self._progress.update(self._task, completed=completed, info=info)


class _NoTask:
    def update(self, completed: int, info: str = "") -> None:
        pass


class _RateColumn(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} {self.unit}/s" if speed else f"- {self.unit}/s", "cyan")


class Console:
    """Lines, progress, tables and summaries, drawn with rich on a terminal and as plain
    text anywhere else.

    `file`: where to write (default: sys.stdout at the time of writing); `say`: a
    callable taking whole lines instead of a file (always plain: tests collect lines
    with it); `force_terminal`: rich's own override (None: ask the file, and rich's
    FORCE_COLOR / TTY_COMPATIBLE variables); `interval`: seconds between two plain
    progress lines."""

    def __init__(
        self,
        file: TextIO | None = None,
        *,
        say: Callable[[str], None] | None = None,
        force_terminal: bool | None = None,
        interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._file = file
        self._say = say
        self.interval = interval
        self._clock = clock
        self._rich = RichConsole(file=file, force_terminal=force_terminal, highlight=False)
        self.is_terminal = (
            say is None and self._rich.is_terminal and not self._rich.is_dumb_terminal
        )

    @classmethod
    def of(cls, out: Console | Callable[[str], None]) -> Console:
        """A console for a caller that passed either one or a line callback (`say`)."""
        return out if isinstance(out, Console) else cls(say=out)

    def say(self, line: str) -> None:
        if self.is_terminal:
            self._rich.print(line, markup=False, highlight=False, soft_wrap=True)
        elif self._say is not None:
            self._say(line)
        else:
            print(line, file=self._file or sys.stdout, flush=True)

    __call__ = say  # a Console is a `say` callback too

    @contextmanager
    def progress(
        self,
        description: str,
        total: int | None,
        *,
        unit: str = "msg",
        plain: bool = True,
    ) -> Iterator[ProgressTask]:
        """A bar with counts, rate and ETA on a terminal; else a plain line at most every
        `interval` seconds and one at the end (none if `plain` is False: for drivers whose
        own lines already tell each step)."""
        if not self.is_terminal:
            if not plain:
                yield _NoTask()
                return
            task = _PlainTask(self.say, description, total, unit, self.interval, self._clock)
            try:
                yield task
            finally:
                task.close()
            return
        bar = Progress(
            TextColumn("   [progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            _RateColumn(unit),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=self._rich,
        )
        with bar:
            yield _RichTask(bar, bar.add_task(description, total=total, info=""))

    def table(
        self,
        columns: Sequence[Column | str],
        rows: Sequence[Sequence[str]],
        title: str | None = None,
    ) -> None:
        if not self.is_terminal:
            for line in plain_table(columns, rows, title):
                self.say(line)
            return
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
        for c in (c if isinstance(c, Column) else Column(c) for c in columns):
            table.add_column(c.header, justify=c.align)
        for r in rows:
            table.add_row(*r)
        self._rich.print(table)

    def summary(self, items: Sequence[SummaryItem], width: int) -> None:
        """A summary: in plain text its exact lines (`summary_lines`); on a terminal a
        table of its rows, titled by its first line, the RESULT line below in colour."""
        if not self.is_terminal:
            for line in summary_lines(items, width):
                self.say(line)
            return
        first_row = next((n for n, i in enumerate(items) if isinstance(i, Row)), len(items))
        last_row = max((n for n, i in enumerate(items) if isinstance(i, Row)), default=-1)
        head = [i for i in items[:first_row] if isinstance(i, str)]
        table = Table(
            title=head[0] if head else None,
            box=box.SIMPLE,
            show_header=False,
            title_justify="left",
            title_style="bold",
        )
        table.add_column(style="bold")
        table.add_column(justify="right")
        table.add_column()
        for line in head[1:]:
            self.say(line)
        for item in items[first_row : last_row + 1]:
            if isinstance(item, Row):
                table.add_row(item.label, item.value.strip(), item.note)
            else:
                table.add_row("", "", Text(item.strip(), "dim"))
        self._rich.print(table)
        for item in items[last_row + 1 :]:
            line = str(item)
            style = (
                "bold green" if "PASS" in line[:14] else "bold red" if "FAIL" in line[:14] else ""
            )
            self._rich.print(Text(line, style))
