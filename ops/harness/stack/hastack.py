"""The replicated servers of `make chaos ARGS=--ha`, on free ports in a folder of the run's own
and removed afterwards: three brokers (ops/ha.sh: replication 3, min.insync.replicas 2)
and Redis with Sentinel (ops/sentinel.sh: a primary, its replica, three Sentinels), with
the server faults the chaos driver asks for by the names it uses for the plain stack:

* `restart_kafka`: a broker SIGKILLed (a crash, no controlled shutdown), kept down for
  `broker_down_s`, started again on its own data, and waited for until every partition
  is fully in sync again (bounded), so that the next kill takes a member that is whole.
  The brokers are taken in turn (1, 2, 3, ...): two kills take two different brokers, so
  the second one also takes replicas the first restart had to catch up on, and the
  leaders of both move (the same broker twice would leave a third of the partitions'
  leaders alone).
* `restart_redis`: the Redis primary SIGKILLed; the Sentinels promote its replica, the
  old primary is started again as the new one's replica and waited for (bounded).
* `pause_replica` / `resume_replica`: the replica frozen (SIGSTOP) and let go (SIGCONT):
  with `redis.min_replica_acks=1` no table write is acknowledged meanwhile.

    stack = HaStack.private(tmp_dir, unit_links=5)
    stack.up(); ...; stack.down()
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ops.harness.stack.hacluster import HaCluster
from ops.harness.stack.localstack import ROOT
from ops.harness.stack.sentinelset import SentinelSet
from router.config import KafkaSettings, RedisSettings

IN_SYNC_TIMEOUT_S = 120.0  # after a broker's restart
WHOLE_TIMEOUT_S = 90.0  # after a failover: the old primary back as a replica


@dataclass
class HaStack:
    cluster: HaCluster
    sentinels: SentinelSet
    broker_down_s: float = 5.0
    restarts: dict[str, int] = field(default_factory=lambda: {"kafka": 0, "redis": 0})
    _next_broker: int = 1

    @classmethod
    def private(cls, folder: Path, unit_links: int = 0) -> HaStack:
        return cls(
            HaCluster.private(ROOT / "ops" / "ha.sh", folder / "ha", unit_links=unit_links),
            SentinelSet.private(ROOT / "ops" / "sentinel.sh", folder / "sentinel"),
        )

    # ------------------------------------------------------------------ settings

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def unit_listeners(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        return self.cluster.unit_listeners

    @property
    def redis_port(self) -> None:
        """No one Redis for a unit's own proxy: the Sentinels hand every client the data
        node's own address; a unit's proxies are to each data node and Sentinel
        (`node_ports`, `sentinel_ports`; ops.harness.stack.netlinks)."""
        return None

    @property
    def node_ports(self) -> tuple[int, ...]:
        """The Redis data nodes' (each announced at 127.0.0.1 and its port)."""
        return tuple(self.sentinels.node_ports)

    @property
    def sentinel_ports(self) -> tuple[int, ...]:
        return tuple(self.sentinels.sentinel_ports)

    def kafka_settings(self) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=self.bootstrap, replication_factor=3, min_insync_replicas=2
        )

    def redis_settings(self, key_prefix: str) -> RedisSettings:
        """Through the Sentinels; a unit forwards nothing no replica acknowledged."""
        return self.sentinels.redis_settings(key_prefix=key_prefix, min_replica_acks=1)

    # ------------------------------------------------------------------ running

    def up(self) -> None:
        self.cluster.up()
        try:
            self.sentinels.up()
            self.sentinels.wait_whole()
        except BaseException:
            self.cluster.down()
            raise

    def down(self) -> None:
        try:
            for node in (1, 2):
                self.sentinels.resume(node)  # a no-op unless paused
            self.sentinels.down()
        finally:
            self.cluster.down()

    def restart_kafka(self) -> str:
        """SIGKILL the next broker, start it again, wait until all is in sync; what happened."""
        broker = self._next_broker
        self._next_broker = broker % len(self.cluster.broker_ports) + 1
        self.cluster.stop(broker, kill=True)
        time.sleep(self.broker_down_s)  # the fault's length: the broker stays away this long
        self.cluster.start(broker)
        self.restarts["kafka"] += 1
        t0 = time.monotonic()
        admin = self.cluster.admin()
        try:
            self.cluster.wait_in_sync(admin, timeout=IN_SYNC_TIMEOUT_S)
            synced = f"in sync {time.monotonic() - t0:.0f} s after its start"
        except TimeoutError as exc:
            synced = f"NOT in sync: {str(exc).splitlines()[0]}"
        return f"broker {broker} SIGKILLed, down {self.broker_down_s:.0f} s, back; {synced}"

    def restart_redis(self) -> str:
        """SIGKILL the Redis primary; the Sentinels fail over; the old one comes back as the
        new one's replica. What happened."""
        t0 = time.monotonic()
        old = self.sentinels.kill_primary()
        new = self.sentinels.wait_failover(old)
        promoted = time.monotonic() - t0
        self.sentinels.start(old)
        self.restarts["redis"] += 1
        try:
            self.sentinels.wait_whole(WHOLE_TIMEOUT_S)
            whole = f"node {old} back as its replica"
        except TimeoutError:
            whole = f"node {old} NOT back as a replica within {WHOLE_TIMEOUT_S:.0f} s"
        return (
            f"Redis primary (node {old}) SIGKILLed; node {new} promoted in "
            f"{promoted:.1f} s; {whole}"
        )

    def pause_replica(self) -> int:
        node = self.sentinels.replica()
        self.sentinels.pause(node)
        return node

    def resume_replica(self, node: int) -> None:
        self.sentinels.resume(node)
