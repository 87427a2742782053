#!/usr/bin/env python3
"""Chaos driver (`make chaos`): the full pipeline under SIGKILLs and server restarts.

    .venv/bin/python -m ops.chaos                    # default: 100,000 messages, 20 kill events
    .venv/bin/python -m ops.chaos --messages 20000 --kills 10 --private-stack
    .venv/bin/python -m ops.chaos --policy share     # not the default: judged by the capacity rule
    .venv/bin/python -m ops.chaos --whole            # every group whole (policy wait)
    .venv/bin/python -m ops.chaos --multicast 0 --expiring 0 --priority 0   # no QoS shares
    .venv/bin/python -m ops.chaos --bands 1          # no priority bands
    .venv/bin/python -m ops.chaos --pauses 3         # also freeze units (SIGSTOP) and resume them
    .venv/bin/python -m ops.chaos --private-stack --net-faults 12   # network faults (Toxiproxy)
    .venv/bin/python -m ops.chaos --break reorder --private-stack   # a broken build: must FAIL
    .venv/bin/python -m ops.chaos --all-features     # + whole groups, logical order (scattered)
    .venv/bin/python -m ops.chaos --ha               # 3 brokers + Sentinel, every feature

By default 5 % of the ordinary messages are multicast, 5 % of the messages have a
lifetime, and the topology has 3 priority bands with 10 % of the ordinary messages and of
the groups sent with a `message-priority` (a group's later members with other
priorities, which the router ignores). Exits non-zero if anything was lost, duplicated,
reordered or split (over two band topics included), a record on the wrong band, a
multicast copy lost or doubled, or a message neither delivered nor expired (or both). By
default it uses (and restarts!) the local stack of this checkout (`make stack-up`);
--private-stack starts a dedicated one on free ports instead and removes it afterwards.
Under the default busy policy, wait (the waiting room), any interleaving fails the run.
With --private-stack the run also has network faults by default (6: one of each kind,
ops.harness.stack.netplan): one unit at a time cut off from Redis past its leases, and
from the broker past its session, its Redis and its broker answers slowed by 100-500 ms,
its connections to each reset; each unit's links run through its own Toxiproxy proxies
(ops/toxiproxy.sh builds Toxiproxy with Go). The checkout's stack has no per-unit broker
listeners: there, --net-faults needs --private-stack.

--all-features: policy wait, and besides the shares above 10 % of the groups with
whole-group delivery (`guarantee-delivery: complete`) and 10 % in logical order, each such
group sent at once, its members shuffled over the send queue's partitions; the verdict
judges that whole groups were released only after their final and arrived contiguous,
and that logical groups came back in sequence (ops.harness.verdict.features).

--ha: the run on replicated servers of its own (free ports, removed afterwards): three
brokers (replication 3, min.insync.replicas 2) and Redis with Sentinel
(redis.min_replica_acks 1). Its server faults: a broker SIGKILLed and started again twice
(two different brokers), the Redis primary SIGKILLed once (Sentinel fails over), the
Redis replica frozen once (no table write acknowledged meanwhile); plus 2 unit pauses and
the network faults, one of each kind: on each unit's own listeners of all three brokers,
and on its own proxies to both Redis data nodes and the three Sentinels (each unit started
with redis.address_map mapping the nodes' announced addresses to its proxies, so that its
connection to the primary, after a failover too, goes through them; a Redis fault hits
the Sentinel proxies as well: the unit can neither reach a node nor ask where one is).
--ha implies --all-features (--no-all-features: not). The summary names every fault kind
with its count; a kind asked for that never happened fails the run.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from ops.harness.breakage import DEFECTS
from ops.harness.console import Console
from ops.harness.scenarios.chaos_result import SUMMARY_WIDTH, summary_rows
from ops.harness.scenarios.chaos_run import ChaosSpec, run_chaos
from ops.harness.signals import exit_on_sigterm
from ops.harness.stack.hastack import HaStack
from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.netplan import KINDS
from router.config import KafkaSettings, RedisSettings, RouterSettings

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    d = ChaosSpec()
    parser.add_argument("--messages", type=int, default=d.messages)
    parser.add_argument("--senders", type=int, default=d.senders)
    parser.add_argument("--rate", type=float, default=d.rate, help="per sender, messages/s")
    parser.add_argument("--kills", type=int, default=d.kills, help="kill events (at least)")
    parser.add_argument(
        "--pauses",
        type=int,
        default=None,
        help="unit processes frozen (SIGSTOP) for --pause-s, past their consumer session "
        "and leases, then resumed (SIGCONT): zombies (default 0, with --ha 2; "
        "docs/explanation/guarantees.md)",
    )
    parser.add_argument("--pause-s", type=float, default=d.pause_s)
    parser.add_argument(
        "--net-faults",
        type=int,
        default=None,
        help="network faults, each on one unit's own Toxiproxy link, the kinds in turn "
        "(default: 6 with --private-stack or --ha, one of each kind; else 0, and more needs "
        "--private-stack or --ha)",
    )
    parser.add_argument(
        "--net-kinds",
        default=",".join(KINDS),
        help=f"comma-separated network fault kinds (default all: {','.join(KINDS)})",
    )
    parser.add_argument("--no-broker-restart", action="store_true")
    parser.add_argument("--no-redis-restart", action="store_true")
    parser.add_argument("--send-units", type=int, default=d.send_units)
    parser.add_argument("--receive-units", type=int, default=d.receive_units)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument(
        "--multicast",
        type=float,
        default=d.multicast_fraction,
        help="share of the ordinary messages sent multicast",
    )
    parser.add_argument(
        "--expiring",
        type=float,
        default=d.expiring_fraction,
        help="share of the messages (finals excepted) sent with a lifetime",
    )
    parser.add_argument(
        "--bands",
        type=int,
        default=None,
        help=f"priority bands (priority.bands; 1: none); default {d.bands}",
    )
    parser.add_argument(
        "--priority",
        type=float,
        default=d.priority_fraction,
        help="share of the ordinary messages and of the groups sent with a message-priority",
    )
    parser.add_argument(
        "--policy",
        choices=["wait", "share", "hold"],
        default=d.busy_policy,
        help="busy policy (default wait, the router's); 'wait' also means 3 transfer "
        "partitions, 3 receive queues and 3 open groups per sender (the room in use), and "
        "fails on any interleaving",
    )
    parser.add_argument(
        "--whole",
        action="store_true",
        help="every group with whole-group delivery (routing.default_delivery = complete); "
        "implies --policy wait",
    )
    parser.add_argument(
        "--private-stack",
        action="store_true",
        help="a dedicated Kafka + Redis on free ports, removed afterwards",
    )
    parser.add_argument(
        "--break",
        dest="breakage",
        choices=sorted(DEFECTS),
        default=None,
        help="run a deliberately broken build (ops/harness/breakage): the verdict must FAIL "
        "(docs/explanation/guarantees.md, how a run is judged)",
    )
    parser.add_argument(
        "--all-features",
        action="store_true",
        help="every feature at once: policy wait, whole groups and logical order (scattered "
        "members) besides multicast, lifetimes and priority bands",
    )
    parser.add_argument(
        "--no-all-features", action="store_true", help="with --ha: not --all-features"
    )
    parser.add_argument(
        "--ha",
        action="store_true",
        help="three brokers and Redis with Sentinel of the run's own: two broker SIGKILLs, a "
        "Redis failover, a replica pause; implies --all-features",
    )
    parser.add_argument(
        "--catch-up-s",
        type=float,
        default=d.catch_up_s,
        help="once all is sent, how long the units get to deliver everything before the "
        "run is judged as it stands",
    )
    parser.add_argument("--run-dir", type=Path, default=ROOT / ".results" / "chaos")
    args = parser.parse_args()
    if args.ha and not args.no_all_features:
        args.all_features = True
    if args.all_features:
        args.policy = "wait"
    if args.pauses is None:
        args.pauses = 2 if args.ha else 0
    if args.whole:
        args.policy = "wait"
    kinds = tuple(k for k in args.net_kinds.split(",") if k)
    if set(kinds) - set(KINDS) or not kinds:
        parser.error(f"--net-kinds: choose among {','.join(KINDS)}")
    if args.net_faults is None:
        args.net_faults = len(kinds) if args.private_stack or args.ha else 0
    if args.net_faults and not (args.private_stack or args.ha):
        parser.error("--net-faults needs --private-stack or --ha (per-unit broker listeners)")
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )

    spec = ChaosSpec(
        messages=args.messages,
        senders=args.senders,
        rate=args.rate,
        kills=args.kills,
        pauses=args.pauses,
        pause_s=args.pause_s,
        net_faults=args.net_faults,
        net_kinds=kinds,
        restart_broker=not args.no_broker_restart,
        restart_redis=not args.no_redis_restart,
        broker_restarts=2 if args.ha else 1,
        redis_at=0.45 if args.ha else 0.65,
        replica_pauses=1 if args.ha else 0,
        whole_fraction=0.1 if args.all_features else 0.0,
        logical_fraction=0.1 if args.all_features else 0.0,
        send_units=args.send_units,
        receive_units=args.receive_units,
        seed=args.seed,
        multicast_fraction=args.multicast,
        expiring_fraction=args.expiring,
        bands=args.bands if args.bands is not None else d.bands,
        priority_fraction=args.priority,
        busy_policy=args.policy,
        delivery="complete" if args.whole else "stream",
        transfer_partitions=3 if args.policy == "wait" else d.transfer_partitions,
        receive_queues=3 if args.policy == "wait" else d.receive_queues,
        open_per_sender=3 if args.policy == "wait" else d.open_per_sender,
        breakage=args.breakage,
        catch_up_s=args.catch_up_s,
    )
    console = Console()
    script = ROOT / "ops" / "stack.sh"
    private_dir = None
    links = args.send_units + args.receive_units
    stack: LocalStack | HaStack
    if args.ha:
        private_dir = Path(tempfile.mkdtemp(prefix="router-chaos-ha-"))
        stack = HaStack.private(private_dir, unit_links=links)
        base = RouterSettings(
            kafka=stack.kafka_settings(), redis=stack.redis_settings(key_prefix="router-chaos")
        )
    else:
        if args.private_stack:
            private_dir = Path(tempfile.mkdtemp(prefix="router-chaos-stack-"))
            stack = LocalStack.private(script, private_dir, unit_links=links)
        else:
            stack = LocalStack(script)
        base = RouterSettings(
            kafka=KafkaSettings(bootstrap_servers=stack.bootstrap),
            redis=RedisSettings(url=stack.redis_url, key_prefix="router-chaos"),
        )
    console.say(f"chaos: starting {'the replicated servers' if args.ha else 'the stack'}")
    stack.up()
    try:
        args.run_dir.mkdir(parents=True, exist_ok=True)
        result = run_chaos(base, stack, spec, args.run_dir, say=console)
    finally:
        if private_dir is not None:
            stack.down()
            shutil.rmtree(private_dir, ignore_errors=True)
    console.summary(summary_rows(result), SUMMARY_WIDTH)
    return 0 if not result.violations() else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
