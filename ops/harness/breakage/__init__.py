"""Deliberately broken builds of the router, for showing that the chaos verdict can fail.

Test-only: nothing here is imported by `router`, and no switch of the router's own code
paths turns a defect on. A unit started through `python -m ops.harness.breakage <defect>
-- <the router's arguments>` monkeypatches the router at start-up (`defects.apply`), then
runs the ordinary `router` command line. `ops/chaos.py --break <defect>` (ChaosSpec's
`breakage`) starts every process of its run that way; the verdict must then FAIL, naming
the guarantee each defect breaks (tests/integration/judge/test_broken_builds.py).
"""

from __future__ import annotations

import sys

from ops.harness.breakage.defects import DEFECTS, Defect

__all__ = ["DEFECTS", "Defect", "command"]


def command(defect: str) -> tuple[str, ...]:
    """The command a fleet runs instead of `python -m router`: the router's arguments
    follow it."""
    if defect not in DEFECTS:
        raise ValueError(f"unknown defect {defect!r}; one of {', '.join(DEFECTS)}")
    return (sys.executable, "-m", "ops.harness.breakage", defect, "--")
