"""Soak: a long run at a steady load with a fault about every minute, sampled all along,
then the chaos verdict and a growth check (`make soak`, `ops/soak.py`).

Senders send at a fixed rate under the default policy (wait), grouped and ordinary
messages (5 % multicast, 5 % with a lifetime: the chaos workload's shares, one priority
band). Every `fault_every_s` a fault, alternately:

* SIGKILL of the unit process in slot 1 of its role (send and receive in turn), restarted
  at once, its replacement armed half the time to kill itself at a fault point
  (`router.utils.faults`), as chaos does;
* SIGSTOP of a unit process in another slot for `pause_s` (past its consumer session and
  its leases), then SIGCONT: a zombie coming back.

The slots 1 take the kills so that the other units and the sweeper live through the whole
run and their memory can be judged. Server restarts are not among the faults: a broker or
Redis restart is a step in lag, in memory (Redis reloads its append-only file compacted) and
in keys that no growth check can tell from growth; `make chaos` has them.

Every `sample_s` the sampler (`soak_sample`) records RSS per slot, Redis memory and keys,
the tables' sizes, topic sizes and lag. At the end the units are stopped and both sides
judged as in chaos (nothing lost, duplicated, reordered or split, no interleaving at all
under wait), the samples written as CSV and PNG, and every judged series checked for growth
over the sending time after its first `warmup` share (`soak_growth`).
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ops.harness.console import Console
from ops.harness.scenarios.chaos_result import ChaosResult
from ops.harness.scenarios.soak_growth import Growth, bounds_for, judge_all, judge_rss
from ops.harness.scenarios.soak_sample import Sampler
from ops.harness.scenarios.supervisor import Supervisor
from ops.harness.stack.fleet import Proc
from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.collect import lanes, read_accounts, read_sides, verdict
from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.visibility import LsoSampler
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.capacity import LOADED_RELEASE_SLACK_MS
from ops.harness.verdict.records import deliveries
from router.config import RouterSettings
from router.utils.faults import DYING


@dataclass(frozen=True)
class SoakSpec:
    minutes: float = 30.0
    senders: int = 4
    rate: float = 25.0  # per sender, messages/s
    fault_every_s: float = 60.0
    pause_s: float = 20.0
    sample_s: float = 5.0
    warmup: float = 0.2  # share of the sending time not judged for growth
    send_units: int = 2
    receive_units: int = 3
    transaction_timeout_ms: int = 6_000
    # The sweeper forgets route-script callers idle this long (sweeper.writer_idle_s; a day
    # by default): short, so that the writers hash reaches its plateau within the run.
    writer_idle_s: int = 180
    seed: int = 1
    catch_up_s: float = 300.0

    @property
    def messages(self) -> int:
        return int(self.minutes * 60 * self.senders * self.rate)


@dataclass
class SoakResult:
    chaos: ChaosResult
    growth: list[Growth]
    samples: int
    faults: list[tuple[float, str]] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    csv: Path | None = None

    def violations(self) -> list[str]:
        out = self.chaos.violations()
        out += [f"grew: {g.line()}" for g in self.growth if g.fails]
        return out


def run_soak(
    base: RouterSettings,
    stack: LocalStack,
    spec: SoakSpec,
    run_dir: Path,
    say: Console | Callable[[str], None] | None = None,
) -> SoakResult:
    console = Console() if say is None else Console.of(say)
    say = console.say
    rng = random.Random(spec.seed)
    pspec = PipelineSpec(
        send_units=spec.send_units,
        receive_units=spec.receive_units,
        transfer_partitions=3,
        receive_queues=3,
        busy_policy="wait",
        extra_env={
            "ROUTER_KAFKA__TRANSACTION_TIMEOUT_MS": str(spec.transaction_timeout_ms),
            "ROUTER_SWEEPER__WRITER_IDLE_S": str(spec.writer_idle_s),
        },
    )
    pipeline = Pipeline(base, pspec, run_dir, name=f"soak-{spec.seed}-{secrets.token_hex(3)}")
    t = pipeline.settings.topology
    say(
        f"soak: {spec.minutes:g} min at {spec.senders} x {spec.rate:g} msg/s "
        f"({spec.messages} messages), policy wait; {spec.send_units} send units, "
        f"{spec.receive_units} receive units; a fault every {spec.fault_every_s:g} s "
        f"(SIGKILL of slot 1, SIGSTOP of another slot for {spec.pause_s:g} s, in turn); "
        f"a sample every {spec.sample_s:g} s"
    )
    started = time.monotonic()
    pipeline.start()
    say(f"   units ready in {time.monotonic() - started:.1f} s")
    supervisor = Supervisor(pipeline, say)
    sampler = Sampler(pipeline)
    workload = WorkloadSpec(
        run_id=pipeline.name,
        senders=spec.senders,
        messages=spec.messages,
        rate=spec.rate,
        seed=spec.seed,
        open_per_sender=3,
        multicast_fraction=0.05,
        expiring_fraction=0.05,
        receive_queues=tuple(t.receive_queues),
    )
    collector = Collector(pipeline.settings, group_id=f"{pipeline.name}.progress")
    collector.start()
    # when each record became visible: the judge counts a group's release slack from its
    # final's (ops.harness.verdict.visibility)
    lso = LsoSampler(pipeline.settings.kafka, lanes(pipeline.settings))
    lso.start()
    senders = Senders(pipeline.settings, workload)
    faults: list[tuple[float, str]] = []
    resume: list[tuple[float, Proc]] = []
    t0 = time.monotonic()
    senders.start()
    sending_s = spec.minutes * 60
    next_fault, next_sample, n = spec.fault_every_s, 0.0, 0
    try:
        with console.progress("sent", spec.messages) as bar:
            while not senders.join(timeout=0):
                now = time.monotonic() - t0
                supervisor.check()
                if now >= next_sample:
                    sampler.sample(now)
                    next_sample = now + spec.sample_s
                for at, proc in list(resume):
                    if now >= at:
                        resume.remove((at, proc))
                        supervisor.resume(proc)
                # no fault in the last stretch: the run ends steady
                if now >= next_fault and now < sending_s - spec.fault_every_s / 2:
                    next_fault += spec.fault_every_s
                    what = _fault(n, spec, sampler, supervisor, rng, resume, now)
                    n += 1
                    if what:
                        faults.append((now, what))
                        say(f"   [{now:7.1f}s] {what}")
                bar.update(
                    senders.attempted,
                    f"received {collector.count()}, faults {len(faults)}",
                )
                time.sleep(0.1)  # the driver's own pacing
        sent_at = time.monotonic() - t0
        for _, proc in resume:
            supervisor.resume(proc)
        say(
            f"   [{sent_at:7.1f}s] all sent ({len(senders.sent)} acknowledged); "
            "letting the units catch up"
        )
        expected = deliveries(senders.sent)
        deadline = time.monotonic() + spec.catch_up_s
        with console.progress("received", expected) as bar:
            while collector.accounted() < expected and time.monotonic() < deadline:
                supervisor.check()
                now = time.monotonic() - t0
                if now >= next_sample:
                    sampler.sample(now)
                    next_sample = now + spec.sample_s
                bar.update(collector.accounted())
                time.sleep(0.2)
            bar.update(collector.accounted())
        collector.stop()
        exit_codes = pipeline.stop()
        lso.stop()
        supervisor.check()
        assert pipeline.stopped_at is not None
        say(f"   [{time.monotonic() - t0:7.1f}s] units stopped; reading both sides")
        send, receive = read_sides(pipeline.settings, pipeline.stopped_at)
        chaos = ChaosResult(
            verdict(
                senders.sent,
                send,
                receive,
                release_slack_ms=LOADED_RELEASE_SLACK_MS,
                disturbances=tuple(supervisor.disturbances),
                visibility=lso.visibility(),
                accounts=read_accounts(pipeline.settings),
            ),
            supervisor.deaths,
            {},
            time.monotonic() - t0,
            senders.failures,
            send.undecodable + receive.undecodable,
            supervisor.crashes,
            pipeline.shared(),
            "wait",
            supervisor.pauses,
        )
        armed = {p.name for p in pipeline.fleet.procs if p.popen.pid in supervisor.armed}
        bad_exit = {k: c for k, c in exit_codes.items() if c != 0 and not (c == -9 and k in armed)}
        if bad_exit:
            chaos.crashes.append(f"at the final stop: {bad_exit}")
        bounds = bounds_for(spec.senders * spec.rate)
        series = sampler.series()
        growth = judge_rss(sampler.rss_slots(), bounds["rss"], 0, sent_at, spec.warmup)
        growth += judge_all(
            {k: v for k, v in series.items() if not k.startswith("rss:")},
            bounds,
            0,
            sent_at,
            spec.warmup,
        )
        result = SoakResult(chaos, growth, len(sampler.rows), faults)
        result.csv = run_dir / "samples.csv"
        sampler.write_csv(result.csv)
        result.plots = _plots(series, faults, spec.warmup * sent_at, sent_at, run_dir, say)
        say(f"   [{time.monotonic() - t0:7.1f}s] judged, samples and plots written")
        return result
    finally:
        lso.stop()
        sampler.close()
        pipeline.stop()
        pipeline.cleanup()


def _fault(
    n: int,
    spec: SoakSpec,
    sampler: Sampler,
    supervisor: Supervisor,
    rng: random.Random,
    resume: list[tuple[float, Proc]],
    now: float,
) -> str | None:
    """The n-th fault: kills (slot 1) and pauses (another slot) in turn, each role in turn."""
    role = ("send-unit", "receive-unit")[(n // 2) % 2]
    sampler.slots.update(sampler.pipeline.fleet.procs)
    if n % 2 == 0:
        victim = sampler.slots.proc(role, 1)
        if victim is None:
            return None
        arm = rng.choice([None, *DYING]) if rng.random() < 0.5 else None
        supervisor.kill(victim, arm)
        return f"SIGKILL {role}#1 ({victim.name})" + (f", replacement armed {arm}" if arm else "")
    others = [
        p
        for s, p in sampler.slots.held.get(role, {}).items()
        if s != 1 and p.alive and p.popen.pid not in supervisor.paused
    ]
    if not others:
        return None
    victim = rng.choice(others)
    supervisor.pause(victim)
    resume.append((now + spec.pause_s, victim))
    return f"SIGSTOP {victim.name} for {spec.pause_s:g} s"


def _plots(
    series: dict[str, list[tuple[float, float]]],
    faults: list[tuple[float, str]],
    steady_from: float,
    steady_to: float,
    run_dir: Path,
    say: Callable[[str], None],
) -> list[Path]:
    try:
        from ops.harness.scenarios.soak_plots import plots  # noqa: PLC0415 (the bench extra)

        return plots(series, [f for f, _ in faults], steady_from, steady_to, run_dir)
    except ImportError as exc:  # matplotlib is in the `bench` extra
        say(f"   no plots: {exc}")
        return []
