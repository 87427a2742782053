"""How the sweeper names its tables and times in its logs."""

from __future__ import annotations

from datetime import UTC, datetime

from router.sweeper.horizon import NEVER
from router.table.store.management import Side


def at(ms: float) -> str:
    """A time on the Redis clock, for logs."""
    if ms == NEVER:
        return "never"
    if ms == float("inf"):
        return "forever"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def named(side: Side, cell: int) -> str:
    """A table, for logs: its side, and its cell if not 0."""
    return side if cell == 0 else f"{side} (cell {cell})"
