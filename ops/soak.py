#!/usr/bin/env python3
"""Soak driver (`make soak`): a long run at a steady load with a fault about every minute,
sampled every few seconds, that fails if anything grows once the load is steady.

    .venv/bin/python -m ops.soak                       # 30 minutes, 4 x 25 msg/s, private stack
    .venv/bin/python -m ops.soak --minutes 60 --rate 50 --fault-every-s 45

Faults, in turn: a unit process SIGKILLed (slot 1 of its role; its replacement sometimes
armed to kill itself at a fault point) and a unit process frozen (SIGSTOP) past its session
and leases, then resumed. Sampled: each process's RSS per role slot, Redis used_memory and
keys, the tables' sizes, topic sizes, consumer lag. At the end: the chaos verdict (nothing
lost, duplicated, reordered or split, no interleaving under the default policy wait), the
samples as CSV and one PNG per family in the run folder (.results/soak/<time>/), and the
growth check: after the first 20 % of the sending time, the median of the last third of
each series against the first third's, with the bounds of docs/reference/make.md. Exits
non-zero if the verdict or the growth check fails. Always on a private stack (a dedicated
Kafka + Redis on free ports, removed afterwards): nothing shared is touched.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from ops.harness.console import Console, Row, SummaryItem
from ops.harness.scenarios.chaos_result import SUMMARY_WIDTH, summary_rows
from ops.harness.scenarios.soak_run import SoakResult, SoakSpec, run_soak
from ops.harness.signals import exit_on_sigterm
from ops.harness.stack.localstack import LocalStack
from router.config import KafkaSettings, RedisSettings, RouterSettings

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    d = SoakSpec()
    parser.add_argument("--minutes", type=float, default=d.minutes, help="sending time")
    parser.add_argument("--senders", type=int, default=d.senders)
    parser.add_argument("--rate", type=float, default=d.rate, help="per sender, messages/s")
    parser.add_argument("--fault-every-s", type=float, default=d.fault_every_s)
    parser.add_argument("--pause-s", type=float, default=d.pause_s)
    parser.add_argument("--sample-s", type=float, default=d.sample_s)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument(
        "--private-stack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a dedicated Kafka + Redis on free ports (default; --no-private-stack is "
        "refused: a soak must not share its Redis and broker with anything)",
    )
    parser.add_argument("--run-dir", type=Path, default=None)
    args = parser.parse_args()
    if not args.private_stack:
        parser.error("the soak judges the whole Redis (memory, keys): it needs its own stack")
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    spec = SoakSpec(
        minutes=args.minutes,
        senders=args.senders,
        rate=args.rate,
        fault_every_s=args.fault_every_s,
        pause_s=args.pause_s,
        sample_s=args.sample_s,
        seed=args.seed,
    )
    run_dir = args.run_dir or ROOT / ".results" / "soak" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    console = Console()
    stack_dir = Path(tempfile.mkdtemp(prefix="router-soak-stack-"))
    stack = LocalStack.private(ROOT / "ops" / "stack.sh", stack_dir)
    stack.up()
    try:
        base = RouterSettings(
            kafka=KafkaSettings(bootstrap_servers=stack.bootstrap),
            redis=RedisSettings(url=stack.redis_url, key_prefix="router-soak"),
        )
        result = run_soak(base, stack, spec, run_dir, say=console)
    finally:
        stack.down()
    console.summary(soak_rows(result), SUMMARY_WIDTH)
    return 0 if not result.violations() else 1


def soak_rows(result: SoakResult) -> list[SummaryItem]:
    """The chaos summary (the verdict), then the growth check, one line a series."""
    rows = [r for r in summary_rows(result.chaos) if not _is_result(r)]
    rows[0] = "Soak summary"
    rows += [
        Row("faults", f"{len(result.faults)}", "SIGKILL of slot 1 and SIGSTOP, in turn"),
        Row("samples", f"{result.samples}", f"CSV: {result.csv}"),
        Row("plots", f"{len(result.plots)}", ", ".join(p.name for p in result.plots)),
        "Growth (median of the last third of the steady window against the first third's)",
        *(f"    {g.line()}" for g in result.growth),
    ]
    v = result.violations()
    rows.append("RESULT: " + ("PASS" if not v else "FAIL - " + "; ".join(v)))
    return rows


def _is_result(item: SummaryItem) -> bool:
    return isinstance(item, str) and item.startswith("RESULT: ")


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
