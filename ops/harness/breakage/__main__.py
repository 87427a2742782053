"""`python -m ops.harness.breakage <defect> -- <router arguments>`: the router with one
named defect patched in at start-up (`ops.harness.breakage.defects`), then its ordinary
command line (`router.cli.main`)."""

from __future__ import annotations

import sys

from ops.harness.breakage.defects import DEFECTS, apply
from router.cli.main import main


def run(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in DEFECTS or argv[1] != "--":
        sys.exit(f"usage: python -m ops.harness.breakage {{{','.join(DEFECTS)}}} -- ARGS")
    apply(argv[0])
    sys.argv = ["router", *argv[2:]]
    main()


if __name__ == "__main__":
    run(sys.argv[1:])
