"""Priority under backlog (`make bench`, and `python -m ops.harness.benchmark.priority`): how
long high-priority messages take end to end while a backlog of low-priority ones drains,
against the same trickle with no backlog.

Two runs on fresh topologies with priority bands (`priority.bands` = 3), one send unit and
one receive unit (separate processes), each measured once the units warmed up (`WARM`
messages through them, not counted):

* *quiet*: a trickle of high-priority messages (priority 9, on the band send queue
  `<queue>.p2`, as a plain producer writes them) at `rate` per second, nothing else;
* *backlog*: low-priority messages (no header: band 0) are put on the send queue while the
  units run, faster than they drain it, until at least `low` of them wait there (high
  watermark less the send units' committed offsets); the same trickle then starts.

A message's latency is the broker's append time on its receive queue (LogAppendTime on
every band topic of the receive queues) less the send time written in its payload, read
from what the receive queues hold (read_committed) once everything arrived. Reported:
p50/p99 of the high-priority messages in both runs, of the low-priority ones under
backlog, the backlog's drain rate, and the ratio of the high p99 under backlog to the
quiet one (the goal: at most 3).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stats import percentile
from router.config import RouterSettings, load_settings
from router.contract import priority

log = logging.getLogger("router.bench")

BANDS = 3
PADDING = 200  # payload bytes
WARM = 30  # messages through the units before a run is measured


@dataclass(frozen=True)
class PriorityResult:
    low: int  # low-priority messages in the backlog
    high: int  # high-priority messages in each trickle
    rate: float  # of the trickle, per second
    quiet_p50_ms: float
    quiet_p99_ms: float
    high_p50_ms: float  # under backlog
    high_p99_ms: float
    low_p50_ms: float  # the backlog's own
    low_p99_ms: float
    drain_msg_s: float  # the backlog's messages per second through the whole path
    overtaken: float  # share of the backlog (at the trickle's start) landed after the last high
    rounds: int = 1  # percentiles over every round's messages together

    @property
    def ratio(self) -> float:
        """High-priority p99 under backlog / without (the goal: at most 3)."""
        return self.high_p99_ms / self.quiet_p99_ms if self.quiet_p99_ms else float("inf")

    def report(self) -> str:
        return "\n".join(
            [
                f"priority: a backlog of {self.low:,} low-priority messages on the send queue, "
                f"then {self.high} high-priority ones at {self.rate:g}/s (3 bands; 1 send "
                f"unit, 1 receive unit; {self.rounds} rounds, percentiles over all of them)",
                "| messages | p50 ms | p99 ms |",
                "|---|---:|---:|",
                f"| high, no backlog | {self.quiet_p50_ms:,.1f} | {self.quiet_p99_ms:,.1f} |",
                f"| high, under backlog | {self.high_p50_ms:,.1f} | {self.high_p99_ms:,.1f} |",
                f"| low (the backlog) | {self.low_p50_ms:,.1f} | {self.low_p99_ms:,.1f} |",
                f"high p99 under backlog / without: {self.ratio:.2f} (goal <= 3); the backlog "
                f"drained at {self.drain_msg_s:,.0f} msg/s; at least {self.overtaken:.0%} of it "
                "landed after the last high-priority message",
            ]
        )


def _pipeline(base: RouterSettings, run_dir: Path, tag: str) -> Pipeline:
    spec = PipelineSpec(
        send_units=1,
        receive_units=1,
        sweepers=0,
        send_queues=1,
        send_queue_partitions=3,
        transfer_partitions=3,
        receive_queues=3,
        default_ttl_ms=600_000,
        busy_policy="share",  # the bands' overtaking, as measured before wait was the default
        extra_env={"ROUTER_PRIORITY__BANDS": str(BANDS)},
    )
    name = f"prio-{tag}-{int(time.time() * 1000) % 10**8}"
    return Pipeline(base, spec, run_dir / name, name=name)


def _value(kind: str, i: int) -> bytes:
    head = f"{kind}|{i}|{time.time() * 1000:.3f}|".encode()
    return head + b"x" * max(0, PADDING - len(head))


def _backlog(p: Pipeline, probe: Consumer) -> int:
    """Messages on the send queue (band 0) the send unit has not committed yet."""
    q = p.settings.topology.send_queues[0]
    parts = [TopicPartition(q, i) for i in range(p.spec.send_queue_partitions)]
    done = probe.committed(parts, timeout=30)
    total = 0
    for tp in done:
        high = probe.get_watermark_offsets(tp, timeout=30)[1]
        total += high - max(tp.offset, 0)
    return total


def _fill_backlog(p: Pipeline, low: int) -> tuple[int, int]:
    """Put low-priority messages on the send queue, while the units run, until at least
    `low` of them wait there; (messages sent, backlog reached)."""
    kafka = p.settings.kafka.bootstrap_servers
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 50})
    probe = Consumer({"bootstrap.servers": kafka, "group.id": p.settings.topology.send_group})
    q = p.settings.topology.send_queues[0]
    sent = backlog = 0
    try:
        while backlog < low:
            for _ in range(max(low - backlog, 1_000)):
                while True:
                    try:
                        producer.produce(q, _value("low", sent), partition=sent % 3)
                        break
                    except BufferError:
                        producer.poll(0.1)
                sent += 1
            if producer.flush(120):
                raise RuntimeError("the backlog was not all acknowledged")
            backlog = _backlog(p, probe)
    finally:
        probe.close()
    return sent, backlog


def _trickle(p: Pipeline, high: int, rate: float, kind: str = "high") -> None:
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers, "linger.ms": 0})
    q = priority.band_topic(p.settings.topology.send_queues[0], BANDS - 1)
    start = time.monotonic()
    for i in range(high):
        due = start + i / rate
        while (now := time.monotonic()) < due:  # pacing the offered load
            producer.poll(due - now)
        producer.produce(q, _value(kind, i), partition=i % 3, headers=[priority.header(9)])
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("the trickle was not all acknowledged")


def _queues(p: Pipeline) -> list[str]:
    return [b for q in p.settings.topology.receive_queues for b in priority.band_topics(q, BANDS)]


class Collector:
    """Every message on the receive queues' band topics, read with read_committed:
    kind -> (sent ms, landed ms)."""

    def __init__(self, p: Pipeline) -> None:
        self.name = p.name
        self.consumer = Consumer(
            {
                "bootstrap.servers": p.settings.kafka.bootstrap_servers,
                "group.id": f"{p.name}.count",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in _queues(p)])
        self.got: dict[str, list[tuple[float, float]]] = {"low": [], "high": [], "warm": []}
        self.seen = 0

    def until(self, want: int, timeout: float) -> None:
        """Read until `want` messages in all came (TimeoutError after `timeout` s)."""
        deadline = time.monotonic() + timeout
        while self.seen < want:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: {self.seen} of {want} arrived in {timeout}s")
            for m in self.consumer.consume(1000, 0.5):
                if m.error() is None:
                    kind, _, sent, _ = (m.value() or b"").split(b"|", 3)
                    self.got[kind.decode()].append((float(sent), float(m.timestamp()[1])))
                    self.seen += 1

    def close(self) -> None:
        self.consumer.close()


def _run(
    base: RouterSettings, run_dir: Path, tag: str, low: int, high: int, rate: float
) -> tuple[dict[str, list[tuple[float, float]]], int]:
    """One run, after the units warmed up (`WARM` messages through, not counted);
    (what the receive queues hold, the backlog when the trickle started)."""
    p = _pipeline(base, run_dir, tag)
    collector = None
    try:
        p.start()
        collector = Collector(p)
        _trickle(p, WARM, 10.0, kind="warm")
        collector.until(WARM, timeout=300)
        sent, backlog = _fill_backlog(p, low) if low else (0, 0)
        _trickle(p, high, rate)
        collector.until(WARM + sent + high, timeout=600)
        return collector.got, backlog
    finally:
        if collector is not None:
            collector.close()
        p.stop()
        p.cleanup()


def run_priority(
    base: RouterSettings,
    run_dir: Path,
    *,
    low: int = 100_000,
    high: int = 300,
    rate: float = 100.0,
    rounds: int = 3,
    say: Callable[[str], None] = print,
) -> PriorityResult:
    """`rounds` pairs of runs, quiet then backlog (see the module's docstring); the
    percentiles over every round's messages together (one round is 300 samples: its p99
    is its third worst, at the mercy of a loaded machine's stalls)."""
    q_ms: list[float] = []
    h_ms: list[float] = []
    l_ms: list[float] = []
    backlogs, drains, overtaken = [], [], []
    for n in range(1, rounds + 1):
        say(f"priority, round {n}/{rounds}: {high} high-priority messages at {rate:g}/s, quiet")
        quiet, _ = _run(base, run_dir, f"quiet{n}", 0, high, rate)
        say(f"priority, round {n}/{rounds}: a backlog of {low:,} low-priority messages first")
        loaded, backlog = _run(base, run_dir, f"backlog{n}", low, high, rate)
        q_ms += [landed - sent for sent, landed in quiet["high"]]
        h_ms += [landed - sent for sent, landed in loaded["high"]]
        lows = loaded["low"]
        l_ms += [landed - sent for sent, landed in lows]
        last_high = max(landed for _, landed in loaded["high"])
        first, last = min(x for _, x in lows), max(x for _, x in lows)
        backlogs.append(backlog)
        drains.append(len(lows) / max((last - first) / 1000, 1e-3))
        # of the backlog as it stood when the trickle began (lows sent while filling it
        # that landed meanwhile are not part of it)
        after = sum(x > last_high for _, x in lows)
        overtaken.append(min(after / max(backlog, 1), 1.0))
    result = PriorityResult(
        low=min(backlogs),
        high=high,
        rate=rate,
        quiet_p50_ms=percentile(q_ms, 0.50, empty=0.0),
        quiet_p99_ms=percentile(q_ms, 0.99, empty=0.0),
        high_p50_ms=percentile(h_ms, 0.50, empty=0.0),
        high_p99_ms=percentile(h_ms, 0.99, empty=0.0),
        low_p50_ms=percentile(l_ms, 0.50, empty=0.0),
        low_p99_ms=percentile(l_ms, 0.99, empty=0.0),
        drain_msg_s=sum(drains) / len(drains),
        overtaken=min(overtaken),
        rounds=rounds,
    )
    say(result.report())
    return result


def stage(base: RouterSettings, out: Path, say: Callable[[str], None] = print) -> bool:
    """The bench stage (`make bench`): both runs at full size; the table appended to
    out/results.md, the figures to out/priority.json. False if the goal was missed."""
    result = run_priority(base, out / "runs", say=say)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "results.md").open("a") as f:
        f.write("\n" + result.report() + "\n")
    (out / "priority.json").write_text(json.dumps({**asdict(result), "ratio": result.ratio}))
    return result.ratio <= 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--low", type=int, default=100_000)
    parser.add_argument("--high", type=int, default=300)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(".results/bench"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = run_priority(
        load_settings(),
        args.out / "runs",
        low=args.low,
        high=args.high,
        rate=args.rate,
        rounds=args.rounds,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "priority.md").write_text(result.report() + "\n")
    (args.out / "priority.json").write_text(json.dumps({**asdict(result), "ratio": result.ratio}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
