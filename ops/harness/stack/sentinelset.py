"""Redis with Sentinel (ops/sentinel.sh) from Python: a primary, its replica and three
Sentinels, each data node of which can be SIGKILLed, paused (SIGSTOP) and started again.

The tests start one on free ports in a temporary folder (tests/integration/sentinel),
beside the shared stack, whose Redis they never touch; the drivers measure on one.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from ops.harness.stack.localstack import free_port
from router.backends.redis.client import RedisClient, redis_client
from router.config import RedisSettings

HOST = "127.0.0.1"


@dataclass
class SentinelSet:
    script: Path  # ops/sentinel.sh
    sentinel_dir: Path
    node_ports: tuple[int, int] = (6391, 6392)
    sentinel_ports: tuple[int, ...] = (26391, 26392, 26393)
    service: str = "router"
    down_after_ms: int = 2000
    kills: int = 0

    @classmethod
    def private(cls, script: Path, sentinel_dir: Path, down_after_ms: int = 1500) -> SentinelSet:
        return cls(
            script,
            sentinel_dir,
            (free_port(), free_port()),
            (free_port(), free_port(), free_port()),
            down_after_ms=down_after_ms,
        )

    def _run(self, *args: str) -> str:
        env = {
            **os.environ,
            "ROUTER_SENTINEL_DIR": str(self.sentinel_dir),
            "ROUTER_REDIS_PRIMARY_PORT": str(self.node_ports[0]),
            "ROUTER_REDIS_REPLICA_PORT": str(self.node_ports[1]),
            "ROUTER_SENTINEL_PORTS": ",".join(map(str, self.sentinel_ports)),
            "ROUTER_SENTINEL_SERVICE": self.service,
            "ROUTER_SENTINEL_DOWN_AFTER_MS": str(self.down_after_ms),
        }
        done = subprocess.run(
            [str(self.script), *args], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"ops/sentinel.sh {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
            )
        return done.stdout

    # ------------------------------------------------------------------ running

    def up(self) -> None:
        self._run("up")

    def down(self) -> None:
        self._run("down")

    def kill_primary(self) -> int:
        """SIGKILL the primary; the node (1 or 2) that was."""
        out = self._run("kill-primary")
        self.kills += 1
        return int(out.strip().splitlines()[-1])

    def start(self, node: int) -> None:
        """Start `node` again (a no-op if it runs): the primary's replica, unless the
        Sentinels name it primary."""
        self._run("node-start", str(node))

    def pause(self, node: int) -> None:
        self._run("node-stop", str(node), "--stop")

    def resume(self, node: int) -> None:
        self._run("node-stop", str(node), "--cont")

    # ------------------------------------------------------------------ settings

    @property
    def sentinels(self) -> tuple[str, ...]:
        return tuple(f"{HOST}:{p}" for p in self.sentinel_ports)

    def redis_settings(self, **extra: Any) -> RedisSettings:
        """Settings that reach the set through its Sentinels."""
        return RedisSettings(sentinels=self.sentinels, sentinel_service=self.service, **extra)

    def node_client(self, node: int) -> RedisClient:
        """A client of one data node, whatever its role (to observe it)."""
        port = self.node_ports[node - 1]
        return redis_client(RedisSettings(url=f"redis://{HOST}:{port}/0"))

    # ------------------------------------------------------------------ observing

    def primary(self) -> int | None:
        """The node the Sentinels name primary now (None: none answers)."""
        try:
            out = self._run("primary").strip()
        except RuntimeError:
            return None
        port = int(out.rsplit(":", 1)[1])
        return self.node_ports.index(port) + 1 if port in self.node_ports else None

    def replica(self) -> int:
        primary = self.primary()
        assert primary is not None, "no Sentinel names a primary"
        return 3 - primary

    def replicas_online(self, node: int) -> int:
        """Replicas `node` (a primary) streams to, online (0 if it does not answer)."""
        try:
            client: Any = self.node_client(node)  # redis-py types results as a union
            info: dict[str, Any] = client.info("replication")
        except redis.RedisError:
            return 0
        return sum(
            1
            for key, value in info.items()
            if key.startswith("slave")
            and isinstance(value, dict)
            and value.get("state") == "online"
        )

    def wait_failover(self, old: int, timeout: float = 60.0) -> int:
        """Until the Sentinels name a primary other than `old`; that node."""
        return self._wait(lambda: (p := self.primary()) is not None and p != old, timeout)

    def wait_whole(self, timeout: float = 60.0) -> int:
        """Until the primary the Sentinels name has its replica online; the primary."""

        def whole() -> bool:
            p = self.primary()
            return p is not None and self.replicas_online(p) >= 1

        return self._wait(whole, timeout)

    def _wait(self, done: Any, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"sentinel set: not so within {timeout:.0f} s\n{self.status()}")
            time.sleep(0.2)
        primary = self.primary()
        assert primary is not None
        return primary

    def status(self) -> str:
        try:
            return self._run("status")
        except RuntimeError as exc:  # status exits 1 when something is stopped
            return str(exc)
