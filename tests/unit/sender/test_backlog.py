"""The sender's backlog estimate keeps its last figures and backs off while a refresh
fails (a leader away), and measures every `refresh_s` again once one succeeds."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import pytest

from router.sender import backlog
from router.sender.backlog import Backlog

TP = tuple[str, int]


class Ends:
    """An EndOffsets' answers: a failed request leaves its partitions out."""

    def __init__(self) -> None:
        self.fail = False
        self.end = 10
        self.calls: list[list[TP]] = []

    def __call__(self, tps: Iterable[TP]) -> dict[TP, int]:
        wanted = list(tps)
        self.calls.append(wanted)
        return {} if self.fail else dict.fromkeys(wanted, self.end)


class Committed:
    def read(self, group: str, tps: Any, timeout: float) -> dict[tuple[str, int], int]:
        return {("q", 0): 4}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr("router.utils.clock.time.monotonic", lambda: now[0])
    return now


def test_a_failing_refresh_keeps_the_estimate_and_backs_off_then_recovers(
    clock: list[float],
) -> None:
    ends = Ends()
    b = Backlog(ends, Committed(), "units", [("q", 0)], refresh_s=1.0, slack=0)  # type: ignore[arg-type]
    assert b.current() == {("q", 0): 6}
    assert ends.calls == [[("q", 0)]]

    ends.fail, ends.end = True, 50
    tries = []
    for _ in range(200):  # 100 s in 0.5 s steps
        clock[0] += 0.5
        n = len(ends.calls)
        assert b.current() == {("q", 0): 6}  # the last good figures
        if len(ends.calls) > n:
            tries.append(clock[0])
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps[:5] == [2.0, 4.0, 8.0, 16.0, 30.0]  # doubling from refresh_s, capped
    assert max(gaps) == backlog.MAX_BACKOFF_S

    ends.fail = False
    clock[0] += backlog.MAX_BACKOFF_S
    assert b.current() == {("q", 0): 46}
    n = len(ends.calls)
    clock[0] += 1.0
    b.current()
    assert len(ends.calls) == n + 1  # every refresh_s again
