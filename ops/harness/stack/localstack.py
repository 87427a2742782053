"""Control of a local stack (ops/stack.sh) from Python: start, stop and restart its servers.

The chaos driver and the server-away tests use a *private* stack (its own ports and data
folder) so that restarting a broker never disturbs anything else. The Spark drivers use
the stack that answers, or start the checkout's (`ensure_stack`).
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from router.backends.kafka import clients
from router.backends.redis.client import redis_client
from router.config import RouterSettings

ROOT = Path(__file__).resolve().parents[3]  # the repository
STACK_SCRIPT = ROOT / "ops" / "stack.sh"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listener_port() -> int:
    """A free TCP port of 127.0.0.1 below the ephemeral range, for a listener bound only
    much later (a unit's fault proxy, once the servers are up): an ephemeral port free now
    may meanwhile become the local port of some client's connection, and the bind fails
    (seen: "address already in use" for a --ha run's proxy)."""
    rng = random.SystemRandom()
    low = ephemeral_low()
    for _ in range(200):
        port = rng.randrange(10_000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The lowest port the kernel gives outgoing connections (32768 if unknown)."""
    try:
        low = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768
    return max(low, 10_001)


@dataclass
class LocalStack:
    script: Path  # ops/stack.sh
    stack_dir: Path | None = None  # None: the default .stack of the checkout
    kafka_port: int = 9092
    controller_port: int = 9093
    redis_port: int = 6379
    restarts: dict[str, int] = field(default_factory=lambda: {"kafka": 0, "redis": 0})
    # Extra broker listeners, (port, advertised port) each: a fault proxy on the advertised
    # port forwarding to the port carries all of one unit's broker traffic
    # (ROUTER_KAFKA_UNIT_LISTENERS of ops/stack.sh; ops.harness.stack.netlinks).
    unit_listeners: tuple[tuple[int, int], ...] = ()

    @classmethod
    def private(cls, script: Path, stack_dir: Path, unit_links: int = 0) -> LocalStack:
        """`unit_links`: how many extra listeners for per-unit fault proxies."""
        listeners = tuple((listener_port(), listener_port()) for _ in range(unit_links))
        return cls(
            script, stack_dir, free_port(), free_port(), free_port(), unit_listeners=listeners
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def _run(self, *args: str) -> str:
        env = {
            **os.environ,
            "ROUTER_KAFKA_PORT": str(self.kafka_port),
            "ROUTER_KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "ROUTER_REDIS_PORT": str(self.redis_port),
            "ROUTER_KAFKA_UNIT_LISTENERS": " ".join(f"{p}:{a}" for p, a in self.unit_listeners),
        }
        if self.stack_dir is not None:
            env["ROUTER_STACK_DIR"] = str(self.stack_dir)
        done = subprocess.run(
            [str(self.script), *args], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"ops/stack.sh {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def up(self) -> None:
        self._run("up")

    def down(self) -> None:
        self._run("down")

    def kafka_stop(self, kill: bool = False) -> None:
        self._run("kafka-stop", *(["--kill"] if kill else []))

    def kafka_start(self) -> None:
        self._run("kafka-start")

    def redis_stop(self, kill: bool = False) -> None:
        self._run("redis-stop", *(["--kill"] if kill else []))

    def redis_start(self) -> None:
        self._run("redis-start")

    def redis_wipe(self) -> None:
        """Redis comes back *without* its data (a lost volume, a replica promoted empty)."""
        self.redis_stop()
        data = (self.stack_dir or self.script.parent.parent / ".stack") / "redis"
        for path in data.rglob("*"):
            if path.is_file():
                path.unlink()
        self.redis_start()
        self.restarts["redis"] += 1

    def restart_kafka(self, kill: bool = False) -> str:
        """The broker stopped (SIGTERM: a controlled shutdown; `kill`: SIGKILL, a crash) and
        started again."""
        self.kafka_stop(kill)
        self.kafka_start()
        self.restarts["kafka"] += 1
        return "broker back"

    def restart_redis(self) -> str:
        """Graceful: SHUTDOWN writes the append-only file, the restart reloads it."""
        self.redis_stop()
        self.redis_start()
        self.restarts["redis"] += 1
        return "Redis back"


def ensure_stack(settings: RouterSettings, say: Callable[[str], None]) -> None:
    """Use Kafka and Redis if they answer; else start the local stack (ops/stack.sh up)."""

    def answers() -> bool:
        try:
            AdminClient(clients.admin_config(settings.kafka)).list_topics(timeout=3)
            return bool(redis_client(settings.redis).ping())
        except Exception:
            return False

    if answers():
        say(f"   Kafka {settings.kafka.bootstrap_servers} and Redis {settings.redis.url} answer")
        return
    if not STACK_SCRIPT.exists():
        raise RuntimeError(f"Kafka or Redis does not answer, and there is no {STACK_SCRIPT}")
    say("   starting the local stack (ops/stack.sh up) ...")
    subprocess.run([str(STACK_SCRIPT), "up"], check=True)
