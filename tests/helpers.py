"""Small test utilities shared by the suites."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def unique(prefix: str) -> str:
    """A name no other test (or earlier run against the same stack) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(
    condition: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.05,
    report: Callable[[], str] | None = None,
) -> T:
    """Poll `condition` until it returns a truthy value; fail the test after `timeout` s
    (with `report()`, if given, appended to the failure: what the test saw meanwhile)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:.1f}s waiting for {what} (last: {last!r})"
                + (f"\n{report()}" if report else "")
            )
        time.sleep(interval)
