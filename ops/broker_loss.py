"""Reproduce librdkafka#5301 on a private stack: clients that lose every broker after a
broker restart.

    .venv/bin/python -m ops.broker_loss --trials 20 --out /tmp/broker-loss

A private single-broker KRaft stack (ops/stack.sh, own ports and data; the shared stack is
never touched). Each trial starts fresh clients with `debug=metadata,broker` (librdkafka's
own log lines, with their timestamps, go to `<out>/trial-<n>.log` through the process's
stderr), lets them produce (idempotent producers, transactional producers) and consume
steadily, restarts the broker the way the chaos run does (SIGTERM: a controlled
shutdown, then a start) and watches each client's statistics: a client that names no
broker (besides the logical coordinators) for over `--stuck-s` seconds after the broker
is back is what #5301 leaves behind. Printed per trial: each client's longest time with
no broker, whether it moved again (a delivery, a commit, a message read), and the
metadata responses that named no broker ("0 brokers" in its log). A trial with a client
that does not move again takes over a minute (26 trials: about 25 minutes). A
transactional producer that meets a fatal error (INVALID_TXN_STATE on the abort after a
commit failed across the restart, seen in some trials) is not replaced here, as the
router's units do: it shows as not moving, with its broker named.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.signals import exit_on_sigterm
from ops.harness.stack.localstack import STACK_SCRIPT, LocalStack

TOPIC = "broker-loss.repro"


@dataclass
class Watched:
    """One client's statistics, as its stats_cb sees them."""

    name: str
    kind: str
    moved_at: float = 0.0  # last delivery / commit / message read (monotonic)
    brokers: str = ""
    no_broker_since: float | None = None
    longest_no_broker_s: float = 0.0
    queued: int = 0
    errors: list[str] = field(default_factory=list)

    def stats(self, raw: str) -> None:
        s = json.loads(raw)
        real = [b for b in s.get("brokers", {}).values() if b.get("source") != "logical"]
        self.brokers = ", ".join(f"{b.get('nodename')} {b.get('state')}" for b in real)
        self.queued = int(s.get("msg_cnt", 0))
        now = time.monotonic()
        if real:
            self.no_broker_since = None
        elif self.no_broker_since is None:
            self.no_broker_since = now
        if self.no_broker_since is not None:
            self.longest_no_broker_s = max(self.longest_no_broker_s, now - self.no_broker_since)


class Client(threading.Thread):
    def __init__(self, watched: Watched, stop: threading.Event) -> None:
        super().__init__(name=watched.name, daemon=True)
        self.w, self.stop = watched, stop

    def base(self, bootstrap: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": bootstrap,
            "client.id": self.w.name,
            "debug": "metadata,broker",
            "statistics.interval.ms": 1000,
            "stats_cb": self.w.stats,
            "error_cb": lambda e: self.w.errors.append(str(e)),
        }


class Idempotent(Client):
    def __init__(self, w: Watched, stop: threading.Event, bootstrap: str) -> None:
        super().__init__(w, stop)
        conf = self.base(bootstrap)
        conf.update({"enable.idempotence": True, "acks": "all", "linger.ms": 5})
        self.p = Producer(conf)

    def delivered(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.w.moved_at = time.monotonic()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                self.p.produce(TOPIC, f"{self.w.name}-{n}".encode(), on_delivery=self.delivered)
                n += 1
            except BufferError:
                pass
            self.p.poll(0.01)


class Asking(Idempotent):
    """An idempotent producer that also asks for the topic's metadata every 20 ms: more
    of its requests fall in the few milliseconds a fenced broker answers with no broker."""

    def run(self) -> None:
        n, asked = 0, 0.0
        while not self.stop.is_set():
            try:
                self.p.produce(TOPIC, f"{self.w.name}-{n}".encode(), on_delivery=self.delivered)
                n += 1
            except BufferError:
                pass
            self.p.poll(0.01)
            if time.monotonic() - asked > 0.02:
                asked = time.monotonic()
                with contextlib.suppress(KafkaException):
                    self.p.list_topics(TOPIC, timeout=0.5)


class Transactional(Client):
    def __init__(self, w: Watched, stop: threading.Event, bootstrap: str) -> None:
        super().__init__(w, stop)
        conf = self.base(bootstrap)
        conf.update({"transactional.id": w.name, "transaction.timeout.ms": 10_000})
        self.p = Producer(conf)

    def run(self) -> None:
        try:
            self.p.init_transactions(30)
        except KafkaException as exc:
            self.w.errors.append(f"init: {exc}")
            return
        while not self.stop.is_set():
            try:
                self.p.begin_transaction()
                for i in range(20):
                    self.p.produce(TOPIC, f"{self.w.name}-{i}".encode())
                self.p.commit_transaction(30)
                self.w.moved_at = time.monotonic()
            except KafkaException as exc:
                err = exc.args[0]
                self.w.errors.append(f"txn: {err}")
                if err.fatal():
                    return
                try:
                    self.p.abort_transaction(30)
                except KafkaException as exc2:
                    self.w.errors.append(f"abort: {exc2}")
            self.p.poll(0.05)


class Reader(Client):
    def __init__(self, w: Watched, stop: threading.Event, bootstrap: str) -> None:
        super().__init__(w, stop)
        conf = self.base(bootstrap)
        conf.update({"group.id": w.name, "auto.offset.reset": "latest"})
        conf["debug"] = "metadata,broker,cgrp"
        self.c = Consumer(conf)
        self.c.subscribe([TOPIC])

    def run(self) -> None:
        while not self.stop.is_set():
            m = self.c.poll(0.2)
            if m is not None and m.error() is None:
                self.w.moved_at = time.monotonic()


def trial(stack: LocalStack, n: int, args: argparse.Namespace, say: Any) -> dict[str, Any]:
    stop = threading.Event()
    kinds: list[tuple[str, Any, int]] = [("idem", Idempotent, args.idempotent)]
    kinds += [("ask", Asking, args.asking), ("txn", Transactional, args.transactional)]
    kinds += [("read", Reader, args.readers)]
    clients: list[Client] = []
    for kind, cls, count in kinds:
        for i in range(count):
            w = Watched(f"t{n:02d}-{kind}-{i}", kind)
            clients.append(cls(w, stop, stack.bootstrap))
    for c in clients:
        c.start()
    time.sleep(args.warm_s)
    t0 = time.monotonic()
    stack.restart_kafka()
    back = time.monotonic()
    say(f"trial {n}: broker restarted in {back - t0:.1f} s")
    deadline = back + args.wait_s
    while time.monotonic() < deadline:
        if all(c.w.moved_at > back for c in clients):
            break
        time.sleep(0.5)
    # Stuck: no broker for over stuck_s, or not moved since the restart.
    now = time.monotonic()
    result: dict[str, Any] = {"trial": n, "clients": []}
    for c in clients:
        w = c.w
        gone = (now - w.no_broker_since) if w.no_broker_since is not None else 0.0
        row = {
            "name": w.name,
            "moved": w.moved_at > back,
            "moved_after_s": round(w.moved_at - back, 1) if w.moved_at > back else None,
            "longest_no_broker_s": round(max(w.longest_no_broker_s, gone), 1),
            "brokers_now": w.brokers,
            "queued": w.queued,
            "errors": w.errors[-3:],
        }
        result["clients"].append(row)
        if not row["moved"] or gone > args.stuck_s:
            say(f"  STUCK {json.dumps(row)}")
    ok = [r for r in result["clients"] if r["moved"]]
    slowest = max((r["moved_after_s"] for r in ok), default=None)
    longest = max(r["longest_no_broker_s"] for r in result["clients"])
    say(
        f"  {len(ok)}/{len(clients)} clients moved again (slowest after {slowest} s); "
        f"longest time with no broker {longest} s"
    )
    stop.set()
    for c in clients:
        c.join(35)
    for c in clients:  # destroy in the background: a hang must not stop the trials
        box = [c.__dict__.pop(k) for k in ("p", "c") if k in c.__dict__]
        threading.Thread(target=box.clear, daemon=True).start()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--idempotent", type=int, default=6)
    ap.add_argument("--asking", type=int, default=3)
    ap.add_argument("--transactional", type=int, default=3)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--warm-s", type=float, default=6.0)
    ap.add_argument("--wait-s", type=float, default=60.0)
    ap.add_argument("--stuck-s", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=Path("broker-loss"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = (args.out / "report.txt").open("a")

    def say(line: str) -> None:
        print(line, file=report, flush=True)
        print(line, flush=True)

    stack = LocalStack.private(STACK_SCRIPT, args.out / "stack")
    stack.up()
    say(f"private stack on {stack.bootstrap}")
    try:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 4, 1)]).values():
            with contextlib.suppress(KafkaException):
                f.result(30)
        results = []
        for n in range(args.trials):
            # librdkafka logs to fd 2: one file per trial
            fd = os.open(args.out / f"trial-{n:02d}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            os.close(fd)
            results.append(trial(stack, n, args, say))
            zero = sum(
                1
                for line in (args.out / f"trial-{n:02d}.log").open(errors="replace")
                if re.search(r": 0 brokers, \d+ topics", line)
            )
            say(f"  metadata responses naming no broker in trial {n}: {zero}")
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    finally:
        stack.down()
        say("private stack down")
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
