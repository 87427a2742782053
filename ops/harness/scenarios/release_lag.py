"""Measure the release lag that `ops.harness.verdict.capacity.RELEASE_SLACK_MS` must cover.

    .venv/bin/python -m ops.harness.scenarios.release_lag                 # the demo's run, measured
    .venv/bin/python -m ops.harness.scenarios.release_lag --messages 20000 --runs 3

A group's destination counts as busy in its table until the group's entry is removed,
which happens after the transaction that carried its final committed (the settle call).
The capacity rule sees only the final's append time. This runs the demo's topology and
workload while a poller reads both tables' entries every `--poll-ms`, and prints, per
side, the distribution of (the first poll that no longer saw a group's entry) - (the
append time of the group's final on its destination): an upper bound of each group's
release lag, by at most one poll interval. A measurement for choosing the constant, never
part of a verdict (it reads the router's own table).
"""

from __future__ import annotations

import argparse
import secrets
import threading
import time
from pathlib import Path

from ops.harness.scenarios.demo_run import DemoResult, run_pipeline_workload
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.collect import SideRead, verdict
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.capacity import RELEASE_SLACK_MS
from router.backends.redis.client import redis_client
from router.config import RouterSettings, load_settings
from router.table.store.management import Side
from router.topology.side import table_for

SIDES: tuple[Side, Side] = ("send", "receive")


class TablePoller:
    """Polls the entry keys of both tables; for each group, the first poll (wall-clock
    ms) that no longer saw it after it was seen."""

    def __init__(self, settings: RouterSettings, poll_ms: float) -> None:
        self._redis = redis_client(settings.redis)
        self._keys = {s: table_for(settings, s, self._redis).keys.entries for s in SIDES}
        self._interval = poll_ms / 1000
        self.present: dict[str, set[str]] = {s: set() for s in SIDES}
        self.gone_ms: dict[str, dict[str, int]] = {s: {} for s in SIDES}
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="table-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            pipe = self._redis.pipeline(transaction=False)
            for side in SIDES:
                pipe.hkeys(self._keys[side])
            answers = pipe.execute()
            now = int(time.time() * 1000)  # after the answer: an upper bound
            self.polls += 1
            for side, keys in zip(SIDES, answers, strict=True):
                now_present = {k.decode() for k in keys}
                for gid in self.present[side] - now_present:
                    self.gone_ms[side].setdefault(gid, now)
                self.present[side] = now_present


def lags(poller: TablePoller, read: SideRead) -> list[int]:
    """Release lag bounds (ms) of the groups of one side whose release was seen."""
    finals: dict[str, int] = {}
    for r in read.records:
        if r.final and r.group is not None and r.append_ms is not None:
            finals.setdefault(r.group, r.append_ms)
    gone = poller.gone_ms[read.side]
    return sorted(gone[g] - at for g, at in finals.items() if g in gone)


def needed_slack(result: DemoResult, limit_ms: int = 60_000) -> int | None:
    """The smallest release slack with which the capacity rule allows every interleaving
    of the run (None: none up to `limit_ms` does): compared with the measured lags, it
    shows whether the run's disallowed interleavings are all release lag."""
    assert result.reads is not None
    return needed_slack_of(*result.reads, limit_ms=limit_ms)


def needed_slack_of(send: SideRead, receive: SideRead, limit_ms: int = 60_000) -> int | None:
    """`needed_slack` for two sides' final reads."""

    def disallowed(slack: int) -> int:
        return sum(s.disallowed for s in verdict([], send, receive, slack).sides)

    lo, hi = -1, limit_ms
    if disallowed(hi):
        return None
    while hi - lo > 1:  # disallowed at lo (or lo = -1), none at hi: monotone in the slack
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if disallowed(mid) else (lo, mid)
    return hi


def describe(values: list[int]) -> str:
    if not values:
        return "no release seen"
    q = [values[min(len(values) - 1, int(f * len(values)))] for f in (0.5, 0.9, 0.99)]
    return f"{len(values)} groups: p50 {q[0]}, p90 {q[1]}, p99 {q[2]}, max {values[-1]} ms"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--poll-ms", type=float, default=2.0)
    parser.add_argument("--run-dir", type=Path, default=Path(".results/release-lag"))
    args = parser.parse_args()
    everything: dict[str, list[int]] = {s: [] for s in SIDES}
    for run in range(args.runs):
        run_id = f"lag-{secrets.token_hex(3)}"
        spec = PipelineSpec(send_units=2, receive_units=3, transfer_partitions=8, receive_queues=16)
        workload = WorkloadSpec(run_id=run_id, senders=4, messages=args.messages, rate=250)
        with Pipeline(load_settings(None), spec, args.run_dir / run_id, name=run_id) as p:
            poller = TablePoller(p.settings, args.poll_ms)
            poller.start()
            result = run_pipeline_workload(p, workload, say=lambda _: None)
            poller.stop()
            assert result.reads is not None
            print(
                f"run {run + 1}: {poller.polls} polls; violations {result.violations}; "
                f"a release slack of {needed_slack(result)} ms would allow every interleaving"
            )
            for read in result.reads:
                values = lags(poller, read)
                everything[read.side] += values
                print(f"  {read.side:<7} release lag {describe(values)}")
    for side in SIDES:
        print(f"all runs, {side:<7} release lag {describe(sorted(everything[side]))}")
    print(f"RELEASE_SLACK_MS = {RELEASE_SLACK_MS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
