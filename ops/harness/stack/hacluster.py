"""The replicated local Kafka cluster (ops/ha.sh) from Python: one controller and three
brokers, each of which can be stopped, SIGKILLed and started again on its own data.

The tests start one on free ports in a temporary folder (tests/integration/ha), beside
the shared stack, which they never touch.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from ops.harness.stack.localstack import free_port, listener_port
from router.config import KafkaSettings

_quiet = logging.getLogger("ops.hacluster.quiet-librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


@dataclass
class HaCluster:
    script: Path  # ops/ha.sh
    ha_dir: Path
    controller_port: int = 9290
    broker_ports: tuple[int, ...] = (9291, 9292, 9293)
    kills: int = 0
    restarts: dict[int, int] = field(default_factory=dict)
    # Per unit, one extra listener on each broker, (port, advertised port) each: fault
    # proxies on the advertised ports carry all of one unit's broker traffic
    # (ROUTER_HA_UNIT_LISTENERS of ops/ha.sh; ops.harness.stack.netlinks).
    unit_listeners: tuple[tuple[tuple[int, int], ...], ...] = ()

    @classmethod
    def private(cls, script: Path, ha_dir: Path, unit_links: int = 0) -> HaCluster:
        """`unit_links`: how many units get listeners of their own (for fault proxies)."""
        brokers = (free_port(), free_port(), free_port())
        listeners = tuple(
            tuple((listener_port(), listener_port()) for _ in brokers) for _ in range(unit_links)
        )
        return cls(script, ha_dir, free_port(), brokers, unit_listeners=listeners)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.broker_ports)

    def kafka_settings(self, **extra: object) -> KafkaSettings:
        return KafkaSettings(bootstrap_servers=self.bootstrap, **extra)

    def _run(self, *args: str) -> str:
        env = {
            **os.environ,
            "ROUTER_HA_DIR": str(self.ha_dir),
            "ROUTER_HA_CONTROLLER_PORT": str(self.controller_port),
            "ROUTER_HA_BROKER_PORTS": ",".join(map(str, self.broker_ports)),
            "ROUTER_HA_UNIT_LISTENERS": " ".join(
                ",".join(f"{p}:{a}" for p, a in unit) for unit in self.unit_listeners
            ),
        }
        done = subprocess.run(
            [str(self.script), *args], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"ops/ha.sh {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def up(self) -> None:
        self._run("up")

    def down(self) -> None:
        self._run("down")

    def stop(self, broker: int, kill: bool = False) -> None:
        """Stop broker `broker` (1..3): SIGTERM (controlled shutdown) or SIGKILL."""
        self._run("broker-stop", str(broker), *(["--kill"] if kill else []))
        self.kills += kill

    def start(self, broker: int) -> None:
        self._run("broker-start", str(broker))
        self.restarts[broker] = self.restarts.get(broker, 0) + 1

    def log(self, broker: int) -> Path:
        return self.ha_dir / "logs" / f"broker-{broker}.log"

    # ------------------------------------------------------------------ observing

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "logger": _quiet})

    def under_replicated(self, admin: AdminClient, prefix: str = "") -> list[str]:
        """Partitions (of topics named `prefix...`; every topic but the internal ones if
        empty) whose in-sync replicas are fewer than their replicas, or that have no
        leader; ["<no metadata>"] if the cluster does not answer."""
        try:
            topics = admin.list_topics(timeout=5).topics
        except Exception:
            return ["<no metadata>"]
        out = []
        for name, meta in topics.items():
            if not name.startswith(prefix) or (not prefix and name.startswith("__")):
                continue
            for p in meta.partitions.values():
                if p.leader < 0 or len(p.isrs) < len(p.replicas):
                    out.append(f"{name}[{p.id}] isr={sorted(p.isrs)} of {sorted(p.replicas)}")
        return out

    def wait_in_sync(self, admin: AdminClient, prefix: str = "", timeout: float = 120.0) -> None:
        """Until every partition (see `under_replicated`) is fully in sync again."""
        deadline = time.monotonic() + timeout
        while True:
            behind = self.under_replicated(admin, prefix)
            if not behind:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"not in sync after {timeout:.0f} s: {', '.join(behind[:10])}"
                    + (f" and {len(behind) - 10} more" if len(behind) > 10 else "")
                )
            time.sleep(0.2)

    def brokers_up(self, admin: AdminClient) -> int:
        try:
            return len(admin.list_topics(timeout=5).brokers)
        except Exception:
            return 0
