"""The drivers' way out on SIGTERM (`timeout`, CI's cancel, an operator's `kill`): Python's
default ends the process at once, skipping every `finally` and context manager, which left
the units, relays and private stacks a driver had started running after it. SystemExit
unwinds them, as Ctrl-C does."""

from __future__ import annotations

import signal
import sys
from types import FrameType


def _exit(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends it at once
    sys.exit(128 + signum)


def exit_on_sigterm() -> None:
    """From now on SIGTERM raises SystemExit(143) in the main thread."""
    signal.signal(signal.SIGTERM, _exit)
