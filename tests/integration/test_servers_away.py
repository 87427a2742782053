"""Redis or the broker away for several seconds mid-run: units forward nothing without the
table, back off, log it, and resume by themselves; nothing is lost, duplicated, reordered
or split. On a private stack, so stopping servers disturbs nothing else."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ops.harness.collect import Collector
from ops.harness.localstack import LocalStack
from ops.harness.pipeline import Pipeline, PipelineSpec
from ops.harness.verify import verify
from ops.harness.workload import Senders, WorkloadSpec
from router.config import RouterSettings
from tests.helpers import unique, wait_until

pytestmark = pytest.mark.slow

SPEC = PipelineSpec(send_units=2, receive_units=2, transfer_partitions=6, receive_queues=8)
AWAY_S = 5.0


def logs_mention(p: Pipeline, role: str, text: str) -> bool:
    procs = [x for x in p.fleet.procs if x.role == role]
    return bool(procs) and all(text in x.log_path.read_text(errors="replace") for x in procs)


def run_with_outage(
    settings: RouterSettings,
    run_dir: Path,
    stop: object,
    start: object,
    noticed: str,
) -> tuple[Pipeline, int, int]:
    """Traffic flows, a server goes away for AWAY_S, comes back; returns what arrived
    while it was away (at its start and at its end)."""
    assert callable(stop) and callable(start)
    with Pipeline(settings, SPEC, run_dir, name=unique("away"), keep=True) as p:
        workload = WorkloadSpec(run_id=p.name, senders=3, messages=3000, rate=150)
        collector = Collector(p.settings, group_id=unique("checker"))
        collector.start()
        senders = Senders(p.settings, workload)
        senders.start()
        wait_until(lambda: collector.count() > 300, 60, "traffic to flow")
        stop()
        down_at = time.monotonic()
        if noticed:
            wait_until(
                lambda: (
                    logs_mention(p, "send-unit", noticed)
                    and logs_mention(p, "receive-unit", noticed)
                ),
                30,
                f"every unit to log {noticed!r}",
            )
            # What was committed before the outage drains to the checker, then nothing.
            wait_until(lambda: time.monotonic() - collector.last_arrival > 1.0, 30, "quiet")
        during = collector.count()
        wait_until(lambda: time.monotonic() - down_at >= AWAY_S, AWAY_S + 1, "the outage")
        after_outage = collector.count()
        start()
        assert senders.join(timeout=180), "senders did not finish"
        assert senders.failures == []
        assert collector.wait_for(len(senders.sent), timeout=180)
        collector.stop()
        r = verify(senders.sent, collector.seen)
        assert r.sent == workload.messages and r.received == r.sent
        assert (r.lost, r.duplicated, r.reordered, r.split_groups) == (0, 0, 0, 0)
        assert logs_mention(p, "send-unit", "resuming after back-off") or not noticed
    bad = {name: code for name, code in p.exit_codes.items() if code != 0}
    assert not bad, f"units did not stop cleanly: {bad}\n" + "\n".join(
        f"--- {x.name} ---\n{x.tail(40)}" for x in p.fleet.procs if x.name in bad
    )
    p.cleanup()
    return p, during, after_outage


def test_without_redis_units_forward_nothing_and_resume(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path
) -> None:
    _, during, after = run_with_outage(
        private_settings,
        tmp_path,
        private_stack.redis_stop,
        private_stack.redis_start,
        "Redis unavailable, nothing forwarded",
    )
    assert during == after, f"{after - during} messages forwarded while Redis was away"


def test_units_ride_out_a_broker_outage(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path
) -> None:
    run_with_outage(
        private_settings,
        tmp_path,
        private_stack.kafka_stop,
        private_stack.kafka_start,
        "",
    )


def test_sigterm_is_honoured_while_the_broker_is_away(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path
) -> None:
    """Units stuck in a transaction the broker will never finish, or waiting for a new
    transactional producer, and a sweeper waiting for offsets: SIGTERM stops each within
    its grace period (STOP_GRACE_S) with exit code 0. Nothing uncommitted is lost: the
    next owner of a partition replays it."""
    with Pipeline(private_settings, SPEC, tmp_path, name=unique("term"), keep=True) as p:
        workload = WorkloadSpec(run_id=p.name, senders=2, messages=100_000, rate=150)
        collector = Collector(p.settings, group_id=unique("checker"))
        collector.start()
        senders = Senders(p.settings, workload)
        senders.start()
        try:
            wait_until(lambda: collector.count() > 200, 60, "traffic to flow")
            private_stack.kafka_stop(kill=True)
            # Every unit is now stuck in a transaction or waiting for a new producer.
            wait_until(lambda: time.monotonic() - collector.last_arrival > 3.0, 30, "quiet")
            codes = p.stop(timeout=25)
        finally:
            collector.stop()
            private_stack.kafka_start()
        bad = {name: code for name, code in codes.items() if code != 0}
        assert not bad, f"units did not stop cleanly: {bad}\n" + "\n".join(
            f"--- {x.name} ---\n{x.tail(40)}" for x in p.fleet.procs if x.name in bad
        )
        senders.stop()
    p.cleanup()
