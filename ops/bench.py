#!/usr/bin/env python3
"""Benchmark driver (`make bench`): raw relay vs send unit, receive unit and the whole path.

    .venv/bin/python -m ops.bench                 # the full run (under 15 minutes)
    .venv/bin/python -m ops.bench --quick         # the headline workloads only, few messages
    .venv/bin/python -m ops.bench --burst-only    # the burst of open groups only
    .venv/bin/python -m ops.bench --all-open-only # 300 and 3,000 groups all open at once
    .venv/bin/python -m ops.bench --only java --messages 20000   # one part (below) alone
    .venv/bin/python -m ops.bench --only ha --messages 20000     # the three-broker row
    .venv/bin/python -m ops.bench --only cluster                 # the Redis Cluster row

Parts (--only, comma-separated; ops/harness/benchmark/plan.py): relays, units, headline,
chained, scaling, latency, java, redis, ha, trace, tracing, cluster. A run limited to parts
skips the burst.

The full run ends with the burst of open groups (ops/harness/scenarios/burst.py: ~300 groups, 150
open per plain producer, 3 destinations per side) under `share`, `wait` and `wait` with
every group whole (`whole`), side by side, five rounds (`--burst-rounds`): throughput,
ordinary and group latency p50/p99 and interleavings per side, and the ratios to `share`
per round with their median; then 300 and 3,000 groups all open before any final is sent,
under the default policy (the time for 3,000 against 300).

Uses the local stack of this checkout (`make stack-up`). Writes results.md, results.json
and PNG plots to .results/bench/ and prints the table; the last line is
`ratio router/raw = X.XX` (send unit / raw relay on the unsaturated headline: 1 KB, 50 %
grouped, 3 open groups on 12 destinations; the median of side-by-side pairs).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

from ops.harness.benchmark import goals, priority
from ops.harness.benchmark.model import KEY, BenchSpec
from ops.harness.benchmark.plan import PARTS
from ops.harness.benchmark.report import (
    LATENCY_COLUMNS,
    THROUGHPUT_COLUMNS,
    latency_rows,
    report,
    summary,
    throughput_rows,
)
from ops.harness.benchmark.runner import Bench
from ops.harness.console import Console
from ops.harness.scenarios.burst import (
    HEADER,
    VARIANTS,
    BurstStats,
    burst_report,
    burst_spec,
    run_all_open,
    run_burst,
)
from ops.harness.signals import exit_on_sigterm
from ops.harness.stack.pipeline import Pipeline
from router.config import RouterSettings, load_settings

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / ".results" / "bench")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the headline workloads only, 3,000 messages, one round each, no three-broker "
        "row, no Redis Cluster row: checks the driver, not the figures",
    )
    parser.add_argument(
        "--only", default="", help=f"comma-separated parts to run: {', '.join(PARTS)}"
    )
    parser.add_argument("--messages", type=int, default=None, help="messages per filled topic")
    parser.add_argument("--repeats", type=int, default=None, help="rounds of each headline")
    parser.add_argument(
        "--rates",
        default=None,
        help="comma-separated offered loads (msg/s) of the latency and trace runs, instead "
        "of 1,000 msg/s and a quarter and a half of the whole path's maximum",
    )
    parser.add_argument("--no-java", action="store_true", help="skip the Java relay stages")
    parser.add_argument("--no-ha", action="store_true", help="skip the three-broker row")
    parser.add_argument("--no-cluster", action="store_true", help="skip the Redis Cluster row")
    parser.add_argument("--config", type=Path, default=None, help="router TOML (servers)")
    parser.add_argument(
        "--burst",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the burst of open groups (default: yes, except with --quick)",
    )
    parser.add_argument("--burst-only", action="store_true", help="only the burst")
    parser.add_argument(
        "--all-open-only",
        action="store_true",
        help="only the bursts of 300 and 3,000 groups all open before any final",
    )
    parser.add_argument(
        "--burst-rounds", type=int, default=5, help="burst rounds (share, wait, whole) to run"
    )
    args = parser.parse_args()
    if args.burst_rounds < 1:
        parser.error("--burst-rounds must be at least 1")
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    if set(only) - set(PARTS):
        parser.error(f"--only: parts are {', '.join(PARTS)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    spec = BenchSpec()
    if args.quick:
        spec = BenchSpec(
            min_messages=3_000,
            max_messages=3_000,
            repeats=1,
            latency_seconds=3.0,
            latency_warmup_s=0.5,
            latency_rates=(),
            latency_fractions=(0.5,),
            sizes=(KEY.size,),
            grouped=(KEY.grouped,),
            open_groups=(KEY.open_groups,),
            ha=False,
            cluster=False,
        )
    if args.messages is not None:
        spec = replace(spec, min_messages=args.messages, max_messages=args.messages)
    if args.rates is not None:
        rates = tuple(float(r) for r in args.rates.split(",") if r.strip())
        spec = replace(spec, latency_rates=rates, latency_fractions=())
    if args.repeats is not None:
        spec = replace(spec, repeats=max(1, args.repeats))
    spec = replace(
        spec,
        java=spec.java and not args.no_java,
        ha=spec.ha and not args.no_ha,
        cluster=spec.cluster and not args.no_cluster,
    )
    settings = load_settings(args.config)
    console = Console()
    started = time.monotonic()
    if args.burst_only:
        return 0 if burst(settings, args.out, args.burst_rounds, console) else 1
    if args.all_open_only:
        return 0 if all_open(settings, args.out, console) else 1
    bench = Bench(settings, spec, args.out / "runs", out=console)
    results = bench.run(only)
    md = report(results, args.out)
    if console.is_terminal:
        console.table(THROUGHPUT_COLUMNS, throughput_rows(results), title="Throughput")
        console.table(LATENCY_COLUMNS, latency_rows(results), title="Latency")
    else:  # in logs, the Markdown that results.md holds
        console.say(f"\n{md}\n")
    console.say(f"results, plots: {args.out} ({time.monotonic() - started:.0f}s in all)")
    for line in summary(results) + goals.lines(results):
        console.say(line)
    kept = True
    if args.burst if args.burst is not None else not (args.quick or only):
        # a guarantee broken fails the run
        kept = burst(settings, args.out, args.burst_rounds, console)
        kept = all_open(settings, args.out, console) and kept
        priority.stage(settings, args.out, console.say)  # docs/explanation/priority.md
    console.say(f"ratio router/raw = {results.ratio:.2f}")
    return 0 if kept else 1


def burst(
    settings: RouterSettings, out: Path, rounds: int = 5, console: Console | None = None
) -> bool:
    """The burst under each variant (share, wait, whole), side by side, `rounds` times (a
    new workload seed each round); a table appended to results.md. A burst lasts seconds,
    so one run is noisy: the ratios to `share` are taken per round and their median is
    reported. True if every run kept every guarantee (`share` may interleave)."""
    console = console or Console()
    console.say(
        f"\nburst of open groups (about 300, 150 open per plain producer, 3 destinations), "
        f"{rounds} rounds of {', '.join(VARIANTS)}"
    )
    runs: list[dict[str, BurstStats]] = []
    for n in range(rounds):
        stats: dict[str, BurstStats] = {}
        for name, (policy, env) in VARIANTS.items():
            console.say(f"  round {n + 1}/{rounds}: {name}")
            run = out / "runs" / f"burst-{n + 1}-{name}"
            with Pipeline(settings, burst_spec(policy, **env), run) as p:
                _, stats[name] = run_burst(p, say=console, seed=7 + n, label=name)
        runs.append(stats)
    lines = burst_report(runs)
    with (out / "results.md").open("a") as f:
        f.write("\n".join(lines) + "\n")
    for line in lines:
        console.say(line)
    # The capacity rule allows `share` its interleavings when every destination is busy;
    # `wait` and whole groups promise none at all.
    return all(not st.violations for r in runs for st in r.values()) and all(
        st.interleaved == (0, 0) for r in runs for name, st in r.items() if name != "share"
    )


def all_open(settings: RouterSettings, out: Path, console: Console | None = None) -> bool:
    """300, then 3,000 groups all open before any final is sent, under the default busy
    policy on the default topology: everything delivered, nothing interleaved, and the
    time for 3,000 against the time for 300 (issue 29: at most 12 times). True if every
    guarantee held and nothing was interleaved."""
    console = console or Console()
    console.say("\nall groups open before any final: 300, then 3,000 groups (default policy)")
    runs: list[BurstStats] = []
    for groups in (300, 3_000):
        console.say(f"  {groups} groups")
        default = RouterSettings().routing.busy_policy
        with Pipeline(settings, burst_spec(default), out / "runs" / f"all-open-{groups}") as p:
            _, st = run_all_open(p, groups, say=console)
        runs.append(st)
    ratio = runs[1].seconds / max(runs[0].seconds, 1e-9)
    lines = [
        "",
        "## All groups open before any final (ops/harness/scenarios/burst.py)",
        "",
        "```",
        HEADER.replace("policy  ", "groups  "),
        *(st.row() for st in runs),
        "```",
        "",
        f"time for 3,000 groups / time for 300: {ratio:.2f} (at most 12)",
    ]
    with (out / "results.md").open("a") as f:
        f.write("\n".join(lines) + "\n")
    for line in lines:
        console.say(line)
    return all(not st.violations and st.interleaved == (0, 0) for st in runs)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
