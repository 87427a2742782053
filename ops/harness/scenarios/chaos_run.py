"""Chaos: the full pipeline under fire, then an exact account of every message.

While senders send, unit processes are killed with SIGKILL at random moments and
restarted; some are restarted with a fault-injection point armed (`router.utils.faults`), so
they kill themselves exactly between routing and producing, between producing and
committing, or between committing and settling. The broker is restarted once and Redis
once (with its append-only file) mid-run. A share of the messages is multicast (to every
receive queue, or to a named subset), a share has a lifetime (some long gone, some
short, some long) and a share has a priority (`message-priority`, on a topology with
priority bands; a group's later members say other priorities, which the router must
ignore; `ops.harness.traffic.workload`). At the end the units are stopped, every destination of
both sides (transfer topic, receive queues; every band topic of each) is read from the
beginning to its end with read_committed once the transaction timeout has passed, and
checked against what Kafka acknowledged to the senders: nothing lost, duplicated,
reordered or split (a group on one band topic of one queue), and every interleaving
judged by the capacity rule (`ops.harness.verdict.capacity`, a destination's band topics merged
by append time); every message on its priority's band, a group on its first member's
(`ops.harness.verdict.bands`); every multicast message once on each of its queues; with the
events and dead-letter topics, every message delivered, expired (one ExpiredMessage
event) or dead-lettered, never two of them (`ops.harness.verdict.accounts`). A unit exit that
was neither our kill nor an armed fault injection fails the run too.

The kills and restarts are kept track of by `ops.harness.scenarios.supervisor`; what the
run found, and its summary, is `ops.harness.scenarios.chaos_result`.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ops.harness import breakage
from ops.harness.console import Console
from ops.harness.scenarios.chaos_result import ChaosResult
from ops.harness.scenarios.server_faults import REPLICA_PAUSE, SERVER_FAULTS, ServerFaults
from ops.harness.scenarios.supervisor import UNIT_ROLES, Supervisor
from ops.harness.scenarios.table_dump import dump_tables, tables_at_rest
from ops.harness.stack.fleet import Proc
from ops.harness.stack.hastack import HaStack
from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.netlinks import UnitLinks
from ops.harness.stack.netplan import KINDS, NetFault, plan
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stack.toxiproxy import Toxiproxy
from ops.harness.traffic.collect import lanes, read_accounts, read_sides, verdict
from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.visibility import LsoSampler
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.capacity import LOADED_RELEASE_SLACK_MS
from ops.harness.verdict.records import deliveries
from router.config import RouterSettings
from router.utils.faults import DYING

# The fault points at which an armed replacement SIGKILLs itself; the others (before_route,
# in_assign) freeze it (SIGSTOP) for a caller that resumes it, which the kill events do not.


def replication_env(base: RouterSettings) -> dict[str, str]:
    """The replication of `base` (if set), for the processes."""
    k, env = base.kafka, {}
    if k.replication_factor:
        env["ROUTER_KAFKA__REPLICATION_FACTOR"] = str(k.replication_factor)
    if k.min_insync_replicas:
        env["ROUTER_KAFKA__MIN_INSYNC_REPLICAS"] = str(k.min_insync_replicas)
    return env


@dataclass(frozen=True)
class ChaosSpec:
    messages: int = 100_000
    senders: int = 4
    rate: float = 300.0  # per sender, messages/s
    kills: int = 20  # chaos events; each kills a unit process (some then kill themselves)
    # Pauses: a unit process SIGSTOPped for `pause_s` (longer than its consumer session
    # and its leases), then SIGCONTed: a zombie that must neither write nor corrupt tables.
    pauses: int = 0
    pause_s: float = 20.0
    # Network faults (ops.harness.stack.netplan), each on one unit's own proxies
    # (Toxiproxy): the kinds in turn; needs a stack with unit listeners (--private-stack).
    net_faults: int = 0
    net_kinds: tuple[str, ...] = KINDS
    net_roles: tuple[str, ...] = UNIT_ROLES  # whose links the faults hit
    net_cut_s: float = 20.0  # past the leases (15 s) and the consumer session (10 s)
    net_slow_s: float = 10.0
    restart_broker: bool = True
    restart_redis: bool = True
    # How many (on the replicated servers, `HaStack`: a broker SIGKILLed and started again,
    # the brokers in turn; the Redis primary SIGKILLed, Sentinel failing over), and when
    # the Redis one comes (share of the sending time); the broker ones are spread over
    # 25-70 % of it (one: at 35 %).
    broker_restarts: int = 1
    redis_restarts: int = 1
    redis_at: float = 0.65
    # The Redis replica frozen (SIGSTOP) for `replica_pause_s`, then let go (HaStack only:
    # with redis.min_replica_acks no table write is acknowledged meanwhile).
    replica_pauses: int = 0
    replica_pause_s: float = 10.0
    send_units: int = 2
    receive_units: int = 3
    transfer_partitions: int = 8
    receive_queues: int = 12
    transaction_timeout_ms: int = 6_000
    seed: int = 1
    # "wait" (the router's default): the waiting room, which must interleave nothing at all;
    # use fewer destinations and more open groups than destinations to fill it (as
    # ops/chaos.py does); "share" and "hold" are judged by the capacity rule.
    busy_policy: str = "wait"
    open_per_sender: int = 1
    # "complete": every group whole (routing.default_delivery; needs busy_policy "wait")
    delivery: str = "stream"
    # Delivery QoS shares (ops.harness.traffic.workload): of the ordinary messages, multicast; of
    # the others (finals excepted), with a lifetime.
    multicast_fraction: float = 0.05
    expiring_fraction: float = 0.05
    # Priority bands (priority.bands; 1: none) and, of the ordinary messages and of the
    # groups, the share with a `message-priority` header (ops.harness.traffic.workload).
    bands: int = 3
    priority_fraction: float = 0.1
    # Of the new groups: with whole-group delivery, and in logical order with their members
    # scattered (ops.harness.traffic.workload; judged by ops.harness.verdict.features).
    whole_fraction: float = 0.0
    logical_fraction: float = 0.0
    # How long the units get, once all is sent, to deliver (or expire) every message;
    # then the run is judged as it stands. Tests keep it well inside their own timeout so
    # a stall is reported with its verdict and the units' logs, not killed unexplained.
    catch_up_s: float = 600.0
    # A deliberately broken build (`ops.harness.breakage`: every process of the run is
    # started with that defect patched in), for showing that the verdict fails; None: the
    # router as it is.
    breakage: str | None = None


def run_chaos(
    base: RouterSettings,
    stack: LocalStack | HaStack,
    spec: ChaosSpec,
    run_dir: Path,
    say: Console | Callable[[str], None] | None = None,
) -> ChaosResult:
    """`say`: a Console, or a callback taking each line (plain); default: stdout."""
    console = Console() if say is None else Console.of(say)
    say = console.say
    rng = random.Random(spec.seed)
    pspec = PipelineSpec(
        send_units=spec.send_units,
        receive_units=spec.receive_units,
        transfer_partitions=spec.transfer_partitions,
        receive_queues=spec.receive_queues,
        busy_policy=spec.busy_policy,  # type: ignore[arg-type]
        extra_env={
            "ROUTER_KAFKA__TRANSACTION_TIMEOUT_MS": str(spec.transaction_timeout_ms),
            "ROUTER_ROUTING__DEFAULT_DELIVERY": spec.delivery,
            "ROUTER_PRIORITY__BANDS": str(spec.bands),
            **replication_env(base),
        },
    )
    # The seed fixes the workload and the kills; the name is new each run, so a run
    # killed before its cleanup never leaves topics that the next one would read.
    pipeline = Pipeline(
        base,
        pspec,
        run_dir,
        name=f"chaos-{spec.seed}-{secrets.token_hex(3)}",
        command=breakage.command(spec.breakage) if spec.breakage else None,
    )
    t = pipeline.settings.topology
    say(
        f"chaos: {spec.messages} messages from {spec.senders} senders at {spec.rate:.0f}/s "
        f"each; {spec.send_units} send units, {spec.receive_units} receive units, "
        f"{t.receive_units} transfer partitions, {len(t.receive_queues)} receive queues, "
        f"{spec.bands} priority bands; "
        f"{spec.kills} kill events, {spec.pauses} pauses of {spec.pause_s:.0f} s, "
        f"{spec.net_faults} network faults; "
        + (
            f"{spec.broker_restarts * spec.restart_broker} broker SIGKILLs, "
            f"{spec.redis_restarts * spec.restart_redis} Redis failovers, "
            f"{spec.replica_pauses} Redis replica pauses (3 brokers, Sentinel)"
            if isinstance(stack, HaStack)
            else f"broker restart: {spec.restart_broker}, Redis restart: {spec.restart_redis}"
        )
        + (
            f"; whole groups {spec.whole_fraction:.0%}, logical order {spec.logical_fraction:.0%}"
            " of the groups"
            if spec.whole_fraction or spec.logical_fraction
            else ""
        )
        + (f"; BROKEN BUILD: {spec.breakage} (the verdict must fail)" if spec.breakage else "")
    )
    toxiproxy = Toxiproxy.start(run_dir / "toxiproxy") if spec.net_faults else None
    links = None
    try:
        if toxiproxy is not None:
            counts = {"send-unit": spec.send_units, "receive-unit": spec.receive_units}
            links = UnitLinks(toxiproxy, stack, base.redis.url, counts)
            pipeline.fleet.placement = links.place
        pipeline.start()
    except BaseException:
        if toxiproxy is not None:
            toxiproxy.stop()
        raise
    supervisor = Supervisor(pipeline, say)
    # A commit or release caught by a server restart: the commit is finished or aborted
    # within the transaction timeout, and the units retry after at most their back-off.
    units = pipeline.settings.unit
    server_recover_ms = spec.transaction_timeout_ms + units.backoff_max_ms
    # A unit cut off, slowed or reset: a killed unit's recovery, then a server's.
    supervisor.net_recover_ms = supervisor.kill_recover_ms + server_recover_ms
    workload = WorkloadSpec(
        run_id=pipeline.name,
        senders=spec.senders,
        messages=spec.messages,
        rate=spec.rate,
        seed=spec.seed,
        open_per_sender=spec.open_per_sender,
        multicast_fraction=spec.multicast_fraction,
        expiring_fraction=spec.expiring_fraction,
        receive_queues=tuple(t.receive_queues),
        priority_fraction=spec.priority_fraction,
        whole_fraction=spec.whole_fraction,
        logical_fraction=spec.logical_fraction,
    )
    collector = Collector(pipeline.settings, group_id=f"{pipeline.name}.progress")
    collector.start()
    # when each record became visible: the judge counts a group's release slack from its
    # final's (ops.harness.verdict.visibility)
    sampler = LsoSampler(pipeline.settings.kafka, lanes(pipeline.settings))
    sampler.start()
    senders = Senders(pipeline.settings, workload)
    restarts_before = dict(stack.restarts)  # a stack may serve several runs
    servers = ServerFaults(
        stack,
        supervisor,
        server_recover_ms,
        spec.replica_pause_s,
        lambda: time.monotonic() - t0,
        say,
    )
    t0 = time.monotonic()
    senders.start()
    duration = spec.messages / (spec.senders * spec.rate)
    # Chaos events spread over the sending time; server restarts at 35% and 65% of it (the
    # broker ones over 25-70 % if there are several, the Redis one at `redis_at`).
    events: list[tuple[float, str, Proc | NetFault | None]] = [
        (duration * (0.05 + 0.9 * (i + rng.random()) / spec.kills), "kill", None)
        for i in range(spec.kills)
    ]
    events += [
        (duration * (0.1 + 0.7 * (i + rng.random()) / spec.pauses), "pause", None)
        for i in range(spec.pauses)
    ]
    faults: list[NetFault] = []
    if links is not None:
        faults = plan(
            rng,
            spec.net_faults,
            duration,
            [s for s in links.slots if s.split(".")[0] in spec.net_roles],
            spec.net_kinds,
            spec.net_cut_s,
            spec.net_slow_s,
        )
        events += [(f.at_s, "net", f) for f in faults]
    if spec.restart_broker:
        nb = spec.broker_restarts
        events += [
            (duration * (0.35 if nb == 1 else 0.25 + 0.45 * i / (nb - 1)), "broker", None)
            for i in range(nb)
        ]
    if spec.restart_redis:
        events += [(duration * spec.redis_at, "redis", None)] * spec.redis_restarts
    events += [
        (duration * (0.15 + 0.7 * (i + rng.random()) / spec.replica_pauses), "replica", None)
        for i in range(spec.replica_pauses)
    ]
    events.sort(key=lambda e: e[0])
    try:
        with console.progress("sent", spec.messages) as bar:
            while events or not senders.join(timeout=0) or not servers.idle:
                now = time.monotonic() - t0
                supervisor.check()
                if events and now >= events[0][0]:
                    _, what, target = events.pop(0)
                    if what == "pause":
                        victim = rng.choice(
                            [
                                p
                                for p in pipeline.fleet.procs
                                if p.role in UNIT_ROLES
                                and p.alive
                                and p.popen.pid not in supervisor.paused
                            ]
                        )
                        say(f"   [{now:6.1f}s] SIGSTOP {victim.name} for {spec.pause_s:.0f} s")
                        supervisor.pause(victim)
                        events.append((now + spec.pause_s, "resume", victim))
                        events.sort(key=lambda e: e[0])
                    elif what in ("net", "heal"):
                        assert isinstance(target, NetFault) and links is not None
                        verb = "network fault:" if what == "net" else "healed:"
                        say(f"   [{now:6.1f}s] {verb} {supervisor.net(links, target, what)}")
                        if what == "net":
                            events.append((now + target.hold_s, "heal", target))
                            events.sort(key=lambda e: e[0])
                    elif what == "resume":
                        assert isinstance(target, Proc)
                        if supervisor.resume(target):
                            say(f"   [{now:6.1f}s] SIGCONT {target.name}")
                    elif what == "kill":
                        # Not a frozen one: killed before its SIGCONT, its pause would
                        # never end, and a run whose pauses all end so has had none.
                        victims = [
                            p
                            for p in pipeline.fleet.procs
                            if p.role in UNIT_ROLES
                            and p.alive
                            and p.popen.pid not in supervisor.paused
                        ]
                        victim = rng.choice(victims)
                        arm = rng.choice([None, *DYING])
                        say(
                            f"   [{now:6.1f}s] SIGKILL {victim.name}"
                            + (f", its replacement armed to die {arm}" if arm else "")
                        )
                        supervisor.kill(victim, arm)
                    else:  # broker, redis, replica: on the server faults' own thread
                        servers.submit(what)
                bar.update(
                    senders.attempted,
                    f"received {collector.count()}, kills {sum(supervisor.deaths.values())}",
                )
                time.sleep(0.1)  # the driver's own pacing of events
        say(f"   all sent ({len(senders.sent)} acknowledged); letting the units catch up")
        expected = deliveries(senders.sent)  # received or expired
        deadline = time.monotonic() + spec.catch_up_s
        with console.progress("received", expected) as bar:
            while collector.accounted() < expected and time.monotonic() < deadline:
                supervisor.check()  # injected faults may still fire
                bar.update(collector.accounted())
                time.sleep(0.2)
            bar.update(collector.accounted())
        if collector.accounted() < expected:
            say(
                f"   caught up on {collector.accounted()} of {expected} within "
                f"{spec.catch_up_s:.0f} s; judging the run as it stands"
            )
            dump = run_dir / "tables-at-stall.json"
            keys = dump_tables(pipeline.settings, dump)
            say(f"   the tables as they stand ({keys} keys): {dump}")
        # The fault points stay armed until a replacement dies: disarm by letting the
        # final stop take every process down gracefully.
        collector.stop()
        exit_codes = pipeline.stop()
        sampler.stop()
        supervisor.check()
        assert pipeline.stopped_at is not None
        say(
            "   units stopped; reading both sides from the beginning to the end once the "
            f"transaction timeout ({spec.transaction_timeout_ms} ms) has passed"
        )
        send, receive = read_sides(pipeline.settings, pipeline.stopped_at)
        accounts = read_accounts(pipeline.settings)
        result = ChaosResult(
            verdict(
                senders.sent,
                send,
                receive,
                # Replacements join while traffic flows: the loaded machine's slack.
                release_slack_ms=LOADED_RELEASE_SLACK_MS,
                disturbances=tuple(supervisor.disturbances),
                visibility=sampler.visibility(),
                accounts=accounts,
            ),
            supervisor.deaths,
            {k: n - restarts_before.get(k, 0) for k, n in stack.restarts.items()},
            time.monotonic() - t0,
            senders.failures,
            send.undecodable + receive.undecodable,
            supervisor.crashes,
            pipeline.shared(),
            spec.busy_policy,
            supervisor.pauses,
            supervisor.net_faults,
        )
        result.remembered = pipeline.remembered()
        result.rest, _ = tables_at_rest(pipeline.settings)
        if not all(x.clean for x in result.rest):
            dump_tables(pipeline.settings, run_dir / "tables-at-rest.json")
        restarts = result.restarts
        kinds = SERVER_FAULTS[type(stack)]
        result.faults = {
            "unit SIGKILL": (spec.kills, supervisor.deaths["SIGKILL from outside"]),
            "unit pause": (spec.pauses, supervisor.pauses),
            **{
                k: (sum(f.kind == k for f in faults), supervisor.net_faults[k])
                for k in spec.net_kinds
                if any(f.kind == k for f in faults)
            },
            kinds[2]: (spec.broker_restarts * spec.restart_broker, restarts.get("kafka", 0)),
            kinds[3]: (spec.redis_restarts * spec.restart_redis, restarts.get("redis", 0)),
        }
        if spec.replica_pauses:
            result.faults[REPLICA_PAUSE] = (spec.replica_pauses, servers.done[REPLICA_PAUSE])
        result.crashes += [f"server fault {e}" for e in servers.errors]
        # At the final stop every process must exit 0; -9 only from an armed fault point
        # firing in its last batch (Proc.stop's own SIGKILL after its timeout is a crash).
        armed = {p.name for p in pipeline.fleet.procs if p.popen.pid in supervisor.armed}
        bad_exit = {n: c for n, c in exit_codes.items() if c != 0 and not (c == -9 and n in armed)}
        for n, c in exit_codes.items():
            if c == -9 and n in armed:
                result.deaths["injected at the final stop"] += 1
        if bad_exit:
            result.crashes.append(f"at the final stop: {bad_exit}")
        return result
    finally:
        servers.close()
        sampler.stop()
        pipeline.stop()
        pipeline.cleanup()
        if toxiproxy is not None:
            toxiproxy.stop()
