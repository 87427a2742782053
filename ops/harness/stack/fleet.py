"""Router roles as separate OS processes: start, stop gracefully (SIGTERM), kill (SIGKILL).

Each process runs `python -m router --config <file> <role>` with its own log file, so a
driver can run many copies of each role as an operator would. A fleet can run another
`router` instead (`command`, e.g. the console script of a virtual environment the wheel was
installed into), from a folder of its choice (`cwd`) and with only the environment it is
given (`base_env` instead of this process's). With `metrics=True` each
process serves Prometheus metrics on a free port of its own (`Proc.metrics_port`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ops.harness.stack.localstack import free_port

# Role -> the `router` command that runs it.
ROLES: dict[str, tuple[str, ...]] = {
    "send-unit": ("send-unit",),
    "receive-unit": ("receive-unit",),
    "sweeper": ("sweeper",),
    "send-relay": ("relay", "--side", "send"),
    "receive-relay": ("relay", "--side", "receive"),
}


@dataclass
class Proc:
    role: str
    index: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    started: float = field(default_factory=time.monotonic)
    signalled: bool = False
    metrics_port: int | None = None  # where it serves /metrics, /healthz, /readyz
    slot: str | None = None  # its own fault proxies' slot (Fleet.placement), if any

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM: finish the batch, commit, leave the group. SIGKILL after `timeout`."""
        if self.alive:
            self.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self.log_file.close()
        return self.popen.returncode

    def terminate(self) -> None:
        """Send SIGTERM once (a second one could land after Python restored the default
        handler while exiting)."""
        if self.alive and not self.signalled:
            self.signalled = True
            self.popen.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL at whatever instant this is."""
        if self.alive:
            self.popen.kill()
            self.popen.wait(10)
        self.log_file.close()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


Placement = Callable[[str, Sequence[Proc]], tuple[str | None, Mapping[str, str]]]


class Fleet:
    def __init__(
        self,
        config_file: Path,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        metrics: bool = False,
        *,
        command: Sequence[str] | None = None,
        cwd: Path | None = None,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.metrics = metrics
        self.config_file = config_file
        self.log_dir = log_dir
        self.command = tuple(command or (sys.executable, "-m", "router"))
        self.cwd = cwd
        self.env = {**(os.environ if base_env is None else base_env), **(env or {})}
        self.procs: list[Proc] = []
        # Where a new process of a role goes, given every process so far: a slot name and
        # its environment (ops.harness.stack.netlinks: its own proxies to Redis and Kafka).
        self.placement: Placement | None = None
        self._counter: dict[str, int] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, role: str, count: int = 1, env: Mapping[str, str] | None = None) -> list[Proc]:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
        started = []
        for _ in range(count):
            index = self._counter.get(role, 0) + 1
            self._counter[role] = index
            log_path = self.log_dir / f"{role}-{index}.log"
            log_file = log_path.open("ab")
            port = free_port() if self.metrics else None
            slot, slot_env = self.placement(role, self.procs) if self.placement else (None, {})
            popen = subprocess.Popen(
                [*self.command, "--config", str(self.config_file), *ROLES[role]],
                cwd=self.cwd,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={
                    **self.env,
                    **({"ROUTER_METRICS__PORT": str(port)} if port else {}),
                    **slot_env,
                    **(env or {}),
                },
            )
            proc = Proc(role, index, popen, log_path, log_file, metrics_port=port, slot=slot)
            self.procs.append(proc)
            started.append(proc)
        return started

    def running(self, role: str | None = None) -> list[Proc]:
        return [p for p in self.procs if p.alive and (role is None or p.role == role)]

    def crashed(self) -> list[Proc]:
        """Processes that exited by themselves with an error (not stopped or killed by us)."""
        return [p for p in self.procs if p.popen.returncode not in (None, 0, -9, -15)]

    def stop_all(self, timeout: float = 30.0) -> dict[str, int]:
        """Stop every process gracefully (in parallel); return their exit codes."""
        for p in self.running():
            p.terminate()
        return {p.name: p.stop(timeout) for p in self.procs if not p.log_file.closed}
