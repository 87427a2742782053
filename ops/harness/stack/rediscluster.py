"""A Redis Cluster (ops/cluster.sh) from Python: three primaries with one replica each, any
node of which can be SIGKILLed and started again.

The tests start one on free ports in a temporary folder (tests/integration/cluster), beside
the shared stack, whose Redis they never touch.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from router.backends.redis.client import RedisClient, redis_client
from router.config import RedisSettings

HOST = "127.0.0.1"
NODES = 6
BUS_OFFSET = 10_000  # a node's cluster bus port: its port + 10000


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_cluster_ports(n: int = NODES) -> tuple[int, ...]:
    """`n` ports free now, whose bus ports (+10000) are free too (below the usual
    ephemeral range, so that both stay below 65536)."""
    ports: list[int] = []
    while len(ports) < n:
        port = random.randrange(20_000, 30_000)
        if port not in ports and _bindable(port) and _bindable(port + BUS_OFFSET):
            ports.append(port)
    return tuple(ports)


@dataclass
class ClusterSet:
    script: Path  # ops/cluster.sh
    cluster_dir: Path
    ports: tuple[int, ...] = (6401, 6402, 6403, 6404, 6405, 6406)
    node_timeout_ms: int = 2000
    tls: bool = False  # TLS only and ACL users (ops/cluster.sh, ROUTER_CLUSTER_TLS=1)
    kills: int = 0

    @classmethod
    def private(cls, script: Path, cluster_dir: Path) -> ClusterSet:
        return cls(script, cluster_dir, free_cluster_ports())

    @classmethod
    def private_tls(cls, script: Path, cluster_dir: Path) -> ClusterSet:
        return cls(script, cluster_dir, free_cluster_ports(), tls=True)

    def _run(self, *args: str) -> str:
        env = {
            **os.environ,
            "ROUTER_CLUSTER_DIR": str(self.cluster_dir),
            "ROUTER_CLUSTER_PORTS": ",".join(map(str, self.ports)),
            "ROUTER_CLUSTER_NODE_TIMEOUT_MS": str(self.node_timeout_ms),
            "ROUTER_CLUSTER_TLS": "1" if self.tls else "0",
        }
        done = subprocess.run(
            [str(self.script), *args], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"ops/cluster.sh {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
            )
        return done.stdout

    # ------------------------------------------------------------------ running

    def up(self) -> None:
        self._run("up")

    def down(self) -> None:
        self._run("down")

    def kill(self, node: int) -> None:
        """SIGKILL node `node` (1-6): a crash."""
        self._run("node-stop", str(node), "--kill")
        self.kills += 1

    def pause(self, node: int) -> None:
        """SIGSTOP node `node`; `resume` lets it go on."""
        self._run("node-stop", str(node), "--stop")

    def resume(self, node: int) -> None:
        self._run("node-stop", str(node), "--cont")

    def start(self, node: int) -> None:
        """Start `node` again (a no-op if it runs); it rejoins with its nodes.conf."""
        self._run("node-start", str(node))

    # ------------------------------------------------------------------ settings

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(f"{HOST}:{p}" for p in self.ports)

    def redis_settings(self, **extra: Any) -> RedisSettings:
        """Settings that reach the cluster through all of its nodes as seeds (over TLS as
        the admin user on a TLS cluster, unless `extra` says otherwise)."""
        return RedisSettings(cluster_nodes=self.nodes, **{**self.tls_settings(), **extra})

    def tls_settings(self, url: str = f"rediss://{HOST}/0") -> dict[str, Any]:
        """On a TLS cluster: the URL, the CA and the admin user (nothing otherwise)."""
        if not self.tls:
            return {}
        return {
            "url": url,
            "tls_ca_file": self.cluster_dir / "pki" / "ca.pem",
            "username": "admin",
            "password_file": self.admin_password_file,
        }

    @property
    def admin_password_file(self) -> Path:
        return self.cluster_dir / "secrets" / "admin.password"

    def node_client(self, node: int) -> RedisClient:
        """A client of one node alone, whatever its role (to observe it)."""
        url = f"{'rediss' if self.tls else 'redis'}://{HOST}:{self.ports[node - 1]}/0"
        return redis_client(RedisSettings(**{"url": url, **self.tls_settings(url)}))

    # ------------------------------------------------------------------ observing

    def _ask(self, node: int, *command: str) -> Any:
        try:
            client: Any = self.node_client(node)
            return client.execute_command(*command)
        except redis.RedisError:
            return None

    def keyslot(self, key: str) -> int:
        """CLUSTER KEYSLOT `key`, as the nodes compute it."""
        for node in range(1, NODES + 1):
            slot = self._ask(node, "CLUSTER", "KEYSLOT", key)
            if slot is not None:
                return int(slot)
        raise RuntimeError("no node of the cluster answers")

    def owner(self, key: str) -> int | None:
        """The node (1-6) that is primary for `key`'s slot, as the first answering node
        says (None: none answers or none covers it)."""
        slot = self.keyslot(key)
        for node in range(1, NODES + 1):
            slots = self._ask(node, "CLUSTER", "SLOTS")
            if slots is None:
                continue
            for first, last, primary, *_ in slots:
                if int(first) <= slot <= int(last):
                    port = int(primary[1])
                    return self.ports.index(port) + 1 if port in self.ports else None
            return None
        return None

    def replica_of(self, node: int) -> int | None:
        """The node (1-6) that replicates primary `node`, online (None: none)."""
        client: Any = self.node_client(node)
        try:
            repl: dict[str, Any] = client.info("replication")
        except redis.RedisError:
            return None
        for key, value in repl.items():
            if key.startswith("slave") and isinstance(value, dict):
                port = int(value["port"])
                if value.get("state") == "online" and port in self.ports:
                    return self.ports.index(port) + 1
        return None

    def whole(self) -> bool:
        """Every node answers cluster_state:ok, and every primary streams to a replica
        online."""
        primaries = 0
        for node in range(1, NODES + 1):
            info = self._ask(node, "CLUSTER", "INFO")
            if info is None or b"cluster_state:ok" not in info:
                return False
            client: Any = self.node_client(node)
            try:
                repl: dict[str, Any] = client.info("replication")
            except redis.RedisError:
                return False
            if repl.get("role") == "master":
                primaries += 1
                online = [
                    v for k, v in repl.items() if k.startswith("slave") and isinstance(v, dict)
                ]
                if not any(v.get("state") == "online" for v in online):
                    return False
        return primaries == NODES // 2

    def wait_failover(self, key: str, old: int, timeout: float = 60.0) -> int:
        """Until a node other than `old` is primary for `key`'s slot, with the cluster ok
        on it; that node."""

        def moved() -> bool:
            o = self.owner(key)
            info = self._ask(o, "CLUSTER", "INFO") if o is not None else None
            return o is not None and o != old and info is not None and b"cluster_state:ok" in info

        self._wait(moved, timeout, f"{key}'s slot to move off node {old}")
        node = self.owner(key)
        assert node is not None
        return node

    def wait_whole(self, timeout: float = 60.0) -> None:
        self._wait(self.whole, timeout, "every primary's replica online")

    def _wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"redis cluster: not {what} within {timeout:.0f} s\n{self.status()}"
                )
            time.sleep(0.2)

    def status(self) -> str:
        try:
            return self._run("status")
        except RuntimeError as exc:  # status exits 1 when a node is stopped
            return str(exc)
