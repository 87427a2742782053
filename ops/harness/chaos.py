"""Chaos: the full pipeline under fire, then an exact account of every message.

While senders send, unit processes are killed with SIGKILL at random moments and
restarted; some are restarted with a fault-injection point armed (`router.utils.faults`), so
they kill themselves exactly between routing and producing, between producing and
committing, or between committing and settling. The broker is restarted once and Redis
once (with its append-only file) mid-run. A share of the messages is multicast (to every
receive queue, or to a named subset), a share has a lifetime (some long gone, some
short, some long) and a share has a priority (`message-priority`, on a topology with
priority bands; a group's later members say other priorities, which the router must
ignore; `ops.harness.workload`). At the end the units are stopped, every destination of
both sides (transfer topic, receive queues; every band topic of each) is read from the
beginning to its end with read_committed once the transaction timeout has passed, and
checked against what Kafka acknowledged to the senders: nothing lost, duplicated,
reordered or split (a group on one band topic of one queue), and every interleaving
judged by the capacity rule (`ops.harness.capacity`, a destination's band topics merged
by append time); every message on its priority's band, a group on its first member's
(`ops.harness.bands`); every multicast message once on each of its queues; with the
events and dead-letter topics, every message delivered, expired (one ExpiredMessage
event) or dead-lettered, never two of them (`ops.harness.accounts`). A unit exit that
was neither our kill nor an armed fault injection fails the run too.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ops.harness.capacity import LOADED_RELEASE_SLACK_MS, Disturbance
from ops.harness.collect import Collector, read_accounts, read_sides, verdict
from ops.harness.console import Console, Row, SummaryItem, summary_lines
from ops.harness.demo import interleaving_rows
from ops.harness.fleet import Proc
from ops.harness.localstack import LocalStack
from ops.harness.pipeline import Pipeline, PipelineSpec
from ops.harness.verify import Report, deliveries
from ops.harness.workload import Senders, WorkloadSpec
from router.config import RouterSettings
from router.utils.faults import POINTS

UNIT_ROLES = ("send-unit", "receive-unit")


@dataclass(frozen=True)
class ChaosSpec:
    messages: int = 100_000
    senders: int = 4
    rate: float = 300.0  # per sender, messages/s
    kills: int = 20  # chaos events; each kills a unit process (some then kill themselves)
    restart_broker: bool = True
    restart_redis: bool = True
    send_units: int = 2
    receive_units: int = 3
    transfer_partitions: int = 8
    receive_queues: int = 12
    transaction_timeout_ms: int = 6_000
    seed: int = 1
    # "wait": the waiting room, which must interleave nothing at all; with it, use fewer
    # destinations and more open groups than destinations (see ops/chaos.py --policy).
    busy_policy: str = "share"
    open_per_sender: int = 1
    # "complete": every group whole (routing.default_delivery; needs busy_policy "wait")
    delivery: str = "stream"
    # Delivery QoS shares (ops.harness.workload): of the ordinary messages, multicast; of
    # the others (finals excepted), with a lifetime.
    multicast_fraction: float = 0.05
    expiring_fraction: float = 0.05
    # Priority bands (priority.bands; 1: none) and, of the ordinary messages and of the
    # groups, the share with a `message-priority` header (ops.harness.workload).
    bands: int = 3
    priority_fraction: float = 0.1
    # How long the units get, once all is sent, to deliver (or expire) every message;
    # then the run is judged as it stands. Tests keep it well inside their own timeout so
    # a stall is reported with its verdict and the units' logs, not killed unexplained.
    catch_up_s: float = 600.0


@dataclass
class ChaosResult:
    report: Report
    deaths: Counter[str] = field(default_factory=Counter)  # cause -> count
    restarts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    sender_failures: list[str] = field(default_factory=list)
    undecodable: int = 0
    crashes: list[str] = field(default_factory=list)  # exits that were not kills
    shared: dict[str, int] = field(default_factory=dict)  # router counters: explanation
    policy: str = "share"

    @property
    def kills(self) -> int:
        return sum(self.deaths.values())

    def violations(self) -> list[str]:
        """Broken guarantees (disallowed interleavings on either side included) and unit
        exits that were neither our kills nor armed fault injections."""
        out = self.report.violations()
        if self.policy == "wait":
            out += [
                f"{s.side} side: {s.interleaved} interleaved under policy wait"
                for s in self.report.sides
                if s.interleaved
            ]
        if self.sender_failures:
            out.append(f"sender failures={len(self.sender_failures)}")
        if self.undecodable:
            out.append(f"undecodable={self.undecodable}")
        if self.crashes:
            out.append(f"unexpected unit exits={len(self.crashes)}")
        return out


class Supervisor:
    """Keeps the unit processes running: restarts whatever died, records why."""

    def __init__(self, pipeline: Pipeline, say: Callable[[str], None]) -> None:
        self.pipeline = pipeline
        self.say = say
        self.deaths: Counter[str] = Counter()
        self.crashes: list[str] = []
        self.expected_dead: set[int] = set()  # pids we killed ourselves
        self.armed: dict[int, str] = {}  # pid -> the fault point it was started with
        # When each death happened, for the capacity rule: a unit killed between its
        # commit and its release leaves the release to the sweeper (closing grace, then
        # a round); the bound adds a second round and a second for the rounds' own work.
        sweeper = pipeline.settings.sweeper
        self.kill_recover_ms = sweeper.closing_grace_ms + 2 * sweeper.interval_ms + 1_000
        self.disturbances: list[Disturbance] = []
        self._checked_ms = epoch_ms()
        self._lock = threading.Lock()

    def kill(self, proc: Proc, arm: str | None) -> None:
        with self._lock:
            self.expected_dead.add(proc.popen.pid)
            at = epoch_ms()
            proc.kill()
            self._died(proc, at, epoch_ms(), "SIGKILL")
            self.deaths["SIGKILL from outside"] += 1
            self._start(proc.role, arm)

    def _died(self, proc: Proc, start_ms: int, end_ms: int, what: str) -> None:
        side = proc.role.removesuffix("-unit")
        self.disturbances.append(
            Disturbance(start_ms, end_ms, self.kill_recover_ms, side, f"{what} {proc.name}")
        )

    def _start(self, role: str, arm: str | None) -> None:
        env = {"ROUTER_FAULTS": f"{arm}=0.25"} if arm else None
        (new,) = self.pipeline.fleet.start(role, 1, env=env)
        if arm:
            self.armed[new.popen.pid] = arm

    def check(self) -> None:
        with self._lock:
            since, self._checked_ms = self._checked_ms, epoch_ms()
            for proc in list(self.pipeline.fleet.procs):
                if proc.role not in UNIT_ROLES or proc.alive or proc.log_file.closed:
                    continue
                pid, code = proc.popen.pid, proc.popen.returncode
                proc.log_file.close()
                if pid in self.expected_dead:
                    continue
                arm = self.armed.pop(pid, None)
                self._died(proc, since, self._checked_ms, f"exit {code}")  # since the last look
                if arm and code == -9:
                    self.deaths[f"injected at {arm}"] += 1
                else:
                    self.deaths[f"exit {code}"] += 1
                    self.crashes.append(f"{proc.name} exited {code}:\n{proc.tail(15)}")
                self._start(proc.role, None)


@contextmanager
def server_away(supervisor: Supervisor, recover_ms: int, what: str) -> Iterator[None]:
    """Record the time a server is restarted as a disturbance of both sides."""
    start = epoch_ms()
    try:
        yield
    finally:
        supervisor.disturbances.append(Disturbance(start, epoch_ms(), recover_ms, None, what))


def epoch_ms() -> int:
    """Wall-clock milliseconds, the clock of the broker's append times."""
    return time.time_ns() // 1_000_000


def run_chaos(
    base: RouterSettings,
    stack: LocalStack,
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
        },
    )
    # The seed fixes the workload and the kills; the name is new each run, so a run
    # killed before its cleanup never leaves topics that the next one would read.
    pipeline = Pipeline(base, pspec, run_dir, name=f"chaos-{spec.seed}-{secrets.token_hex(3)}")
    t = pipeline.settings.topology
    say(
        f"chaos: {spec.messages} messages from {spec.senders} senders at {spec.rate:.0f}/s "
        f"each; {spec.send_units} send units, {spec.receive_units} receive units, "
        f"{t.receive_units} transfer partitions, {len(t.receive_queues)} receive queues, "
        f"{spec.bands} priority bands; "
        f"{spec.kills} kill events, broker restart: {spec.restart_broker}, "
        f"Redis restart: {spec.restart_redis}"
    )
    pipeline.start()
    supervisor = Supervisor(pipeline, say)
    # A commit or release caught by a server restart: the commit is finished or aborted
    # within the transaction timeout, and the units retry after at most their back-off.
    units = pipeline.settings.unit
    server_recover_ms = spec.transaction_timeout_ms + units.backoff_max_ms
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
    )
    collector = Collector(pipeline.settings, group_id=f"{pipeline.name}.progress")
    collector.start()
    senders = Senders(pipeline.settings, workload)
    restarts_before = dict(stack.restarts)  # a stack may serve several runs
    t0 = time.monotonic()
    senders.start()
    duration = spec.messages / (spec.senders * spec.rate)
    # Chaos events spread over the sending time; server restarts at 35% and 65% of it.
    events: list[tuple[float, str]] = [
        (duration * (0.05 + 0.9 * (i + rng.random()) / spec.kills), "kill")
        for i in range(spec.kills)
    ]
    if spec.restart_broker:
        events.append((duration * 0.35, "broker"))
    if spec.restart_redis:
        events.append((duration * 0.65, "redis"))
    events.sort()
    try:
        with console.progress("sent", spec.messages) as bar:
            while events or not senders.join(timeout=0):
                now = time.monotonic() - t0
                supervisor.check()
                if events and now >= events[0][0]:
                    _, what = events.pop(0)
                    if what == "kill":
                        victims = [
                            p for p in pipeline.fleet.procs if p.role in UNIT_ROLES and p.alive
                        ]
                        victim = rng.choice(victims)
                        arm = rng.choice([None, *POINTS])
                        say(
                            f"   [{now:6.1f}s] SIGKILL {victim.name}"
                            + (f", its replacement armed to die {arm}" if arm else "")
                        )
                        supervisor.kill(victim, arm)
                    elif what == "broker":
                        say(f"   [{now:6.1f}s] restarting the Kafka broker")
                        with server_away(supervisor, server_recover_ms, "broker restart"):
                            stack.restart_kafka()
                        say(f"   [{time.monotonic() - t0:6.1f}s] broker back")
                    else:
                        say(f"   [{now:6.1f}s] restarting Redis (append-only file kept)")
                        with server_away(supervisor, server_recover_ms, "Redis restart"):
                            stack.restart_redis()
                        say(f"   [{time.monotonic() - t0:6.1f}s] Redis back")
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
        # The fault points stay armed until a replacement dies: disarm by letting the
        # final stop take every process down gracefully.
        collector.stop()
        exit_codes = pipeline.stop()
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
        )
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
        pipeline.stop()
        pipeline.cleanup()


SUMMARY_WIDTH = 21  # the label column of the chaos summary


def summary(result: ChaosResult) -> list[str]:
    """The summary as plain lines (what CI logs and the tests read)."""
    return summary_lines(summary_rows(result), SUMMARY_WIDTH)


def summary_rows(result: ChaosResult) -> list[SummaryItem]:
    r = result.report
    items: list[SummaryItem] = [
        "Chaos summary",
        Row(
            "sent",
            f"{r.sent}",
            "(acknowledged by Kafka" + ("; a multicast copy each)" if r.multicast_sent else ")"),
        ),
        Row("received", f"{r.received}", "(read_committed, read again from the start)"),
        Row("groups", f"{r.groups_sent}", f"complete, in order, on one queue: {r.groups_complete}"),
        Row("lost", f"{r.lost}"),
        Row("duplicated", f"{r.duplicated}"),
        Row("reordered", f"{r.reordered}"),
        Row("split groups", f"{r.split_groups}"),
        *qos_rows(r),
        *interleaving_rows(r, result.shared),
        Row(
            "unit deaths",
            f"{result.kills}",
            ", ".join(f"{k}: {v}" for k, v in sorted(result.deaths.items())),
        ),
        Row(
            "server restarts",
            f"broker {result.restarts.get('kafka', 0)}, Redis {result.restarts.get('redis', 0)}",
        ),
        Row("duration", f"{result.seconds:>9.1f} s"),
    ]
    if result.crashes:
        items.append(Row("unexpected exits", f"{len(result.crashes)} (see below)"))
        items.extend("    " + c.replace("\n", "\n    ") for c in result.crashes[:3])
    if r.accounts is not None and r.accounts.examples:
        items.extend(f"    {e}" for e in r.accounts.examples)
    if r.bands is not None:
        items.extend(f"    {e}" for e in r.bands.examples)
    v = result.violations()
    items.append(
        "RESULT: "
        + (
            "PASS - nothing lost, duplicated, reordered or split; no disallowed interleaving; "
            "every message delivered, expired or dead-lettered once"
            if not v
            else "FAIL - " + "; ".join(v)
        )
    )
    return items


def qos_rows(r: Report) -> list[SummaryItem]:
    """Multicast, lifetimes and priorities: what the queues and the events topic hold."""
    rows: list[SummaryItem] = []
    if r.multicast_sent:
        rows.append(
            Row(
                "multicast",
                f"{r.multicast_sent}",
                f"messages, {r.multicast_copies} copies expected; lost and duplicated "
                "copies are counted above",
            )
        )
    a = r.accounts
    if a is not None:
        rows.append(Row("with a lifetime", f"{a.expiring_sent}", a.accounted()))
        rows.append(
            Row(
                "expired",
                f"{a.expired}",
                f"twice {a.expired_twice}, also delivered {a.expired_and_delivered}, "
                f"without a lifetime {a.expired_unexpected}, early {a.expired_early}",
            )
        )
        rows.append(Row("dead-lettered", f"{a.dead_lettered}", _reasons(a.dead_reasons)))
    if r.bands is not None:
        rows += [Row(*row) for row in r.bands.rows()]
    return rows


def _reasons(reasons: Counter[str]) -> str:
    return ", ".join(f"{k}: {n}" for k, n in sorted(reasons.items()))
