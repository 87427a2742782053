"""The chaos run's supervisor: keeps the unit processes running while the run kills them
(restarts whatever died, with a fault-injection point armed or not), records why each
died, and records every stretch of time that can hold a release up (a unit killed, a
server restarted) as a `Disturbance` for the capacity rule."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ops.harness.stack.fleet import Proc
from ops.harness.stack.netlinks import UnitLinks
from ops.harness.stack.netplan import NetFault
from ops.harness.stack.pipeline import Pipeline
from ops.harness.verdict.capacity import Disturbance

UNIT_ROLES = ("send-unit", "receive-unit")

# What a unit logs when it exits over a consumer left with no broker (router/unit/source.py).
NO_BROKER = "had no broker for"


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
        self.paused: dict[int, int] = {}  # pid -> when it was stopped (epoch ms)
        self.pauses = 0  # pauses that ended with the process resumed
        self.net_faults: Counter[str] = Counter()  # network faults healed, per kind
        self.net_recover_ms = self.kill_recover_ms
        self._net_started: dict[NetFault, int] = {}
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

    def pause(self, proc: Proc) -> None:
        """SIGSTOP: the process is frozen (a long GC pause, a frozen VM) until `resume`.
        Its consumer session and its leases run out meanwhile; when it resumes it is a
        zombie that still believes it owns its partitions and its batch."""
        with self._lock:
            if proc.alive:
                self.paused[proc.popen.pid] = epoch_ms()
                os.kill(proc.popen.pid, signal.SIGSTOP)

    def resume(self, proc: Proc) -> bool:
        """SIGCONT. The whole pause, and the recovery after it, is a disturbance of the
        process's side. False if it died while paused (a kill event chose it)."""
        with self._lock:
            start = self.paused.pop(proc.popen.pid, None)
            if start is None or not proc.alive:
                return False
            os.kill(proc.popen.pid, signal.SIGCONT)
            self.pauses += 1
            side = proc.role.removesuffix("-unit")
            what = f"SIGSTOP..SIGCONT {proc.name}"
            self.disturbances.append(
                Disturbance(start, epoch_ms(), self.kill_recover_ms, side, what)
            )
            return True

    def net(self, links: UnitLinks, fault: NetFault, what: str) -> str:
        """Apply a network fault to its unit link ("net") or heal it ("heal"); the whole
        stretch, and the recovery after it, is a disturbance of the link's side. Returns
        what was done, naming the processes on the link."""
        with self._lock:
            who = ", ".join(links.occupants(fault.slot, self.pipeline.fleet.procs)) or "nobody"
            if what == "net":
                links.apply(fault)
                self._net_started[fault] = epoch_ms()
            else:
                links.heal(fault)
                start = self._net_started.pop(fault)
                self.net_faults[fault.kind] += 1
                side = fault.slot.split("-", 1)[0]
                self.disturbances.append(
                    Disturbance(
                        start, epoch_ms(), self.net_recover_ms, side, f"{fault.kind} {fault.slot}"
                    )
                )
            return f"{fault.describe()} ({who})"

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
                tail = proc.tail(15)
                if arm and code == -9:
                    self.deaths[f"injected at {arm}"] += 1
                elif code == 2 and NO_BROKER in tail:
                    # the unit's own remedy for a consumer librdkafka left with no broker
                    # (router.backends.kafka.brokerwatch): an exit its supervisor restarts,
                    # as ours does; what it did to the queues the verdict still judges
                    self.deaths["exit 2, no broker (librdkafka#5301)"] += 1
                else:
                    self.deaths[f"exit {code}"] += 1
                    self.crashes.append(f"{proc.name} exited {code}:\n{tail}")
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
