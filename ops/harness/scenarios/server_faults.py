"""The chaos run's server faults, one at a time on a thread of their own, so that the run's
unit kills, pauses and network faults go on while a broker takes half a minute to come
back: a broker SIGKILLed and started again, a Redis restart (or failover), the Redis replica
paused. One at a time: a failover never meets a paused replica (which could not be
promoted), nor a broker restart another. Each is recorded as a disturbance of both sides
for the capacity rule, and counted once done."""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable

from ops.harness.scenarios.supervisor import Supervisor, epoch_ms, server_away
from ops.harness.stack.hastack import HaStack
from ops.harness.stack.localstack import LocalStack
from ops.harness.verdict.capacity import Disturbance

# Per kind of stack: what its broker and Redis faults are called (as said, then as counted).
SERVER_FAULTS: dict[type, tuple[str, str, str, str]] = {
    LocalStack: (
        "SIGKILL the Kafka broker, then start it again",
        "restarting Redis (append-only file kept)",
        "broker restart",
        "Redis restart",
    ),
    HaStack: (
        "SIGKILL a broker (3 brokers, replication 3, min.insync.replicas 2)",
        "SIGKILL the Redis primary (Sentinel fails over)",
        "broker SIGKILL",
        "Redis failover",
    ),
}
REPLICA_PAUSE = "Redis replica pause"


class ServerFaults:
    def __init__(
        self,
        stack: LocalStack | HaStack,
        supervisor: Supervisor,
        recover_ms: int,
        replica_pause_s: float,
        clock: Callable[[], float],
        say: Callable[[str], None],
    ) -> None:
        self.stack, self.supervisor, self.recover_ms = stack, supervisor, recover_ms
        self.replica_pause_s = replica_pause_s
        self.clock, self.say = clock, say
        self.done: Counter[str] = Counter()  # REPLICA_PAUSE: pauses ended
        self.errors: list[str] = []
        self._jobs: queue.Queue[str | None] = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="server-faults", daemon=True)
        self._thread.start()

    def submit(self, what: str) -> None:
        """ "broker", "redis" or "replica"."""
        with self._lock:
            self._pending += 1
        self._jobs.put(what)

    @property
    def idle(self) -> bool:
        with self._lock:
            return self._pending == 0

    def close(self, timeout: float = 300.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (what := self._jobs.get()) is not None:
            try:
                self._one(what)
            except Exception as exc:  # reported in the summary, the run goes on
                self.errors.append(f"{what}: {exc!r}")
                self.say(f"   [{self.clock():6.1f}s] {what} FAILED: {exc!r}")
            with self._lock:
                self._pending -= 1

    def _restart_broker(self) -> str:
        """A lone broker is SIGKILLed, not stopped: at the end of its controlled shutdown it
        answers Metadata naming no broker, and librdkafka 2.16 clients that handle that
        answer after the connection closed keep no broker for good (librdkafka#5301,
        reproduced by `ops/broker_loss.py`; the router's own clients replace themselves
        after `kafka.no_broker_replace_s`, the harness's senders would report failures).
        A crash tests the same recovery of the units, and more of the broker's."""
        if isinstance(self.stack, LocalStack):
            return self.stack.restart_kafka(kill=True)
        return self.stack.restart_kafka()

    def _one(self, what: str) -> None:
        names = SERVER_FAULTS[type(self.stack)]
        if what == "replica":
            assert isinstance(self.stack, HaStack)
            node = self.stack.pause_replica()
            start = epoch_ms()
            self.say(f"   [{self.clock():6.1f}s] SIGSTOP the Redis replica (node {node})")
            try:
                time.sleep(self.replica_pause_s)  # the fault's length
            finally:
                self.stack.resume_replica(node)
            self.supervisor.disturbances.append(
                Disturbance(start, epoch_ms(), self.recover_ms, None, "Redis replica paused")
            )
            self.done[REPLICA_PAUSE] += 1
            self.say(f"   [{self.clock():6.1f}s] SIGCONT the Redis replica (node {node})")
            return
        broker = what == "broker"
        self.say(f"   [{self.clock():6.1f}s] {names[0] if broker else names[1]}")
        with server_away(self.supervisor, self.recover_ms, names[2] if broker else names[3]):
            said = self._restart_broker() if broker else self.stack.restart_redis()
        self.say(f"   [{self.clock():6.1f}s] {said}")
