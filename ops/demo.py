"""Demo driver (`make demo`): the whole system end to end, with an independent verdict.

    .venv/bin/python -m ops.demo                      # 6,000 messages, 4 senders
    .venv/bin/python -m ops.demo --messages 20000 --policy share

Creates a fresh topology on the stack named by the router settings (`--config`,
ROUTER_* variables; `make demo` starts the local stack first), runs send units, receive
units and a sweeper as processes, sends a realistic mix, and checks what the receive
queues hold against what the senders recorded. Exits 1 if a guarantee broke.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
from pathlib import Path

from ops.harness.scenarios.demo_run import run_demo
from ops.harness.signals import exit_on_sigterm
from ops.harness.stack.pipeline import PipelineSpec
from ops.harness.traffic.workload import WorkloadSpec
from router.config import load_settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ops.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--messages", type=int, default=6000, help="messages in total")
    p.add_argument("--senders", type=int, default=4, help="concurrent senders")
    p.add_argument("--grouped", type=float, default=0.7, help="share of messages in groups")
    p.add_argument("--max-group", type=int, default=40, help="largest group (order lines)")
    p.add_argument("--rate", type=float, default=250.0, help="per sender, messages/s (0: unpaced)")
    p.add_argument("--send-units", type=int, default=2)
    p.add_argument("--receive-units", type=int, default=3, help="receive-unit processes")
    p.add_argument(
        "--transfer-partitions",
        type=int,
        default=8,
        help="receive-side transfer units (partitions of the transfer topic)",
    )
    p.add_argument("--receive-queues", type=int, default=16)
    p.add_argument(
        "--policy",
        choices=["wait", "share", "hold"],
        default="wait",
        help="busy policy (default wait, the router's: any interleaving fails the run; "
        "share and hold are judged by the capacity rule)",
    )
    p.add_argument("--run-dir", type=Path, default=Path(".results/demo"))
    p.add_argument("--keep", action="store_true", help="keep the run's topics and tables")
    p.add_argument("--config", type=Path, default=None, help="router TOML (servers)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    run_id = f"demo-{secrets.token_hex(3)}"
    workload = WorkloadSpec(
        run_id=run_id,
        senders=args.senders,
        messages=args.messages,
        grouped_fraction=args.grouped,
        max_group=args.max_group,
        rate=args.rate or None,
    )
    spec = PipelineSpec(
        send_units=args.send_units,
        receive_units=args.receive_units,
        transfer_partitions=args.transfer_partitions,
        receive_queues=args.receive_queues,
        busy_policy=args.policy,
    )
    result = run_demo(
        load_settings(args.config),
        workload,
        spec,
        args.run_dir / run_id,
        config_file=args.config,
        keep=args.keep,
    )
    return 0 if result.ok else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
