#!/usr/bin/env python3
"""Benchmark driver (`make bench`): raw relay vs send unit, receive unit and the whole path.

    .venv/bin/python -m ops.bench                 # the full run (about 10 minutes)
    .venv/bin/python -m ops.bench --quick         # the key workload only, few messages

Uses the local stack of this checkout (`make stack-up`). Writes results.md, results.json
and PNG plots to .results/bench/ and prints the table; the last line is
`ratio router/raw = X.XX` (send unit / raw relay at 1 KB, 50 % grouped, 10,000 open groups).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from ops.harness.bench import KEY, Bench, BenchSpec, report, summary
from router.config import load_settings

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / ".results" / "bench")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the ratio line's workload only, 3,000 messages: checks the driver, not the figures",
    )
    parser.add_argument("--config", type=Path, default=None, help="router TOML (servers)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    spec = BenchSpec()
    if args.quick:
        spec = BenchSpec(
            min_messages=3_000,
            max_messages=3_000,
            repeats=2,
            latency_seconds=3.0,
            latency_warmup_s=0.5,
            sizes=(KEY.size,),
            grouped=(KEY.grouped,),
            open_groups=(KEY.open_groups,),
        )
    settings = load_settings(args.config)
    started = time.monotonic()
    bench = Bench(settings, spec, args.out / "runs")
    results = bench.run()
    md = report(results, args.out)
    print()
    print(md)
    print()
    print(f"results, plots: {args.out} ({time.monotonic() - started:.0f}s in all)")
    for line in summary(results):
        print(line)
    print(f"ratio router/raw = {results.ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
