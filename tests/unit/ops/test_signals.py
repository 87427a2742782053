"""A driver stopped with SIGTERM unwinds (its `finally` blocks stop what it started)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys, time
from ops.harness.signals import exit_on_sigterm
exit_on_sigterm()
try:
    print("ready", flush=True)
    time.sleep(60)
finally:
    open(sys.argv[1], "w").write("stopped the fleet")
"""


def test_sigterm_runs_the_drivers_finally_blocks(tmp_path: Path) -> None:
    marker = tmp_path / "cleaned"
    root = Path(__file__).resolve().parents[3]
    p = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(marker)], cwd=root, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == 128 + signal.SIGTERM
    assert marker.read_text() == "stopped the fleet"
