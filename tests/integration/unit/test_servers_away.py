"""Redis or the broker away for several seconds mid-run: units forward nothing without the
table, back off, log it, and resume by themselves; nothing is lost, duplicated, reordered
or split. On a private stack, so stopping servers disturbs nothing else.

Proven from what the destinations hold (both sides, read to their end with read_committed
once the units stopped and the transaction timeout passed), with the broker's append
times (the harness sets LogAppendTime on every destination):

* forwarded without the table: a record whose whole decision window lies inside the
  outage (created, or appended upstream, after the server went away, and appended to its
  destination before it came back) was decided while the table was unreachable;
* resumed by themselves: every acknowledged message arrived, both sides appended records
  after the server came back, and the unit processes that started the run are the ones
  that finished it (none died or was replaced).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.collect import SideRead, read_sides
from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.records import Seen, first_copies
from ops.harness.verdict.verify import verify
from router.config import RouterSettings
from tests.fixtures.helpers import unique, wait_until

pytestmark = pytest.mark.slow

SPEC = PipelineSpec(send_units=2, receive_units=2, transfer_partitions=6, receive_queues=8)
AWAY_S = 5.0
STUCK_S = 3.0


def logs_mention(p: Pipeline, role: str, text: str) -> bool:
    procs = [x for x in p.fleet.procs if x.role == role]
    return bool(procs) and all(text in x.log_path.read_text(errors="replace") for x in procs)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Outage:
    down_ms: int  # the server was gone by then (wall clock, the broker's clock too)
    up_ms: int  # and not back before then
    created_during: int  # messages the senders created while it was away
    decided_away: list[str]  # records whose whole decision window lies in the outage
    appended_after: dict[str, int]  # per side: records appended after it came back
    # records the send side appended early in the outage (from batches it had routed
    # just before): the receive side had to route them while the server was away
    handed_on_early: int = 0
    receive_noticed: bool = False  # a receive unit logged what the test waited for


def outage_evidence(send: SideRead, receive: SideRead, down_ms: int, up_ms: int) -> Outage:
    forwarded, _ = first_copies(send.records)
    received, _ = first_copies(receive.records)
    upstream = {r.event_id: r.append_ms for r in forwarded}

    def window(r: Seen, from_ms: int | None) -> tuple[int, int]:
        assert from_ms is not None and r.append_ms is not None
        return from_ms, r.append_ms

    windows = [(r, *window(r, r.created_ms)) for r in forwarded] + [
        (r, *window(r, upstream.get(r.event_id))) for r in received
    ]
    return Outage(
        down_ms,
        up_ms,
        sum(1 for r in forwarded if r.created_ms is not None and down_ms < r.created_ms < up_ms),
        [
            f"{r.queue}@{r.offset} {r.event_id}: decided within [{f - down_ms:+}, {a - down_ms:+}]"
            f" ms of the outage's start ({up_ms - down_ms} ms long)"
            for r, f, a in windows
            if f > down_ms and a < up_ms
        ],
        {
            side.side: sum(1 for r in side.records if r.append_ms and r.append_ms > up_ms)
            for side in (send, receive)
        },
        sum(1 for r in send.records if r.append_ms and down_ms < r.append_ms < up_ms - 2000),
    )


def run_with_outage(
    settings: RouterSettings,
    run_dir: Path,
    stop: Callable[[], None],
    start: Callable[[], None],
    noticed: str,
) -> Outage:
    """Traffic flows, a server goes away for AWAY_S, comes back; every guarantee checked
    from the destinations; returns the outage's evidence."""
    with Pipeline(settings, SPEC, run_dir, name=unique("away"), keep=True) as p:
        # 3 x 60 messages/s: still sending when the server goes away, and during the outage
        workload = WorkloadSpec(run_id=p.name, senders=3, messages=3000, rate=60)
        collector = Collector(p.settings, group_id=unique("checker"))
        collector.start()
        senders = Senders(p.settings, workload)
        senders.start()
        wait_until(lambda: collector.count() > 300, 60, "traffic to flow")
        units = list(p.fleet.procs)
        stop()
        down_at, down_ms = time.monotonic(), now_ms()
        try:
            assert senders.attempted < workload.messages, "the senders finished too early"
            if noticed:  # units log it (for operators); what they did is judged from data.
                # Every send unit has input while the server is away (the senders go on);
                # a receive unit only if a send unit forwarded something just before.
                wait_until(
                    lambda: logs_mention(p, "send-unit", noticed),
                    30,
                    f"every send unit to log {noticed!r}",
                    report=lambda: "\n".join(
                        f"--- {x.name} ---\n{x.tail(30)}" for x in p.fleet.procs
                    ),
                )
            wait_until(lambda: time.monotonic() - down_at >= AWAY_S, AWAY_S + 1, "the outage")
        finally:
            up_ms = now_ms()
            start()  # whatever failed, the next test finds the server up
        assert senders.join(timeout=180), "senders did not finish"
        assert senders.failures == []
        assert collector.wait_for(len(senders.sent), timeout=180)
        collector.stop()
        dead = [x.name for x in units if not x.alive]
        assert not dead and p.fleet.procs == units, f"units died or were replaced: {dead}"
        codes = p.stop()
        assert p.stopped_at is not None
        send, receive = read_sides(p.settings, p.stopped_at)
        r = verify(senders.sent, receive.records)
        assert r.sent == workload.messages and r.received == r.sent
        assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0,) * 5
        assert send.undecodable == receive.undecodable == 0
        if noticed:  # and they said so, for operators
            assert logs_mention(p, "send-unit", "resuming after back-off")
        receive_noticed = bool(noticed) and any(
            noticed in x.log_path.read_text(errors="replace")
            for x in p.fleet.procs
            if x.role == "receive-unit"
        )
    bad = {name: code for name, code in codes.items() if code != 0}
    assert not bad, f"units did not stop cleanly: {bad}\n" + "\n".join(
        f"--- {x.name} ---\n{x.tail(40)}" for x in p.fleet.procs if x.name in bad
    )
    p.cleanup()
    outage = outage_evidence(send, receive, down_ms, up_ms)
    outage.receive_noticed = receive_noticed
    # Forwarding resumed on both sides once the server was back (and, above, everything
    # acknowledged arrived, exactly once).
    assert all(outage.appended_after.values()), outage
    return outage


def test_without_redis_units_forward_nothing_and_resume(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path
) -> None:
    outage = run_with_outage(
        private_settings,
        tmp_path,
        private_stack.redis_stop,
        private_stack.redis_start,
        "Redis unavailable, nothing forwarded",
    )
    assert outage.created_during > 100, "the senders went on sending during the outage"
    if outage.handed_on_early:
        assert outage.receive_noticed, (
            f"{outage.handed_on_early} records reached the receive side early in the outage, "
            "yet no receive unit logged that it could not route them"
        )
    assert outage.decided_away == [], "forwarded while Redis was away:\n" + "\n".join(
        outage.decided_away[:10]
    )


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
    next owners of the partitions replay it."""
    with Pipeline(private_settings, SPEC, tmp_path, name=unique("term"), keep=True) as p:
        workload = WorkloadSpec(run_id=p.name, senders=2, messages=100_000, rate=150)
        collector = Collector(p.settings, group_id=unique("checker"))
        collector.start()
        senders = Senders(p.settings, workload)
        senders.start()
        try:
            wait_until(lambda: collector.count() > 200, 60, "traffic to flow")
            private_stack.kafka_stop(kill=True)
            # Not a check that nothing more arrives (with the broker gone nothing can):
            # time for every unit to run into the broker's absence, so that SIGTERM
            # finds it in a transaction that cannot finish or waiting for a producer.
            # (No unit says so reliably: an idle one logs nothing until it next calls.)
            time.sleep(STUCK_S)
            codes = p.stop(timeout=25)
        finally:
            collector.stop()
            private_stack.kafka_start()
            stopped = senders.stop()
        bad = {name: code for name, code in codes.items() if code != 0}
        assert not bad, f"units did not stop cleanly: {bad}\n" + "\n".join(
            f"--- {x.name} ---\n{x.tail(40)}" for x in p.fleet.procs if x.name in bad
        )
        assert stopped, "senders did not stop"
        assert senders.failures == []
        # The next owners: new unit processes take the partitions over and replay what
        # the stopped ones had not committed.
        p.exit_codes = {}
        p.fleet.start("send-unit", SPEC.send_units)
        p.fleet.start("receive-unit", SPEC.receive_units)
        p.fleet.start("sweeper", SPEC.sweepers)
        checker = Collector(p.settings, group_id=unique("checker"))
        checker.start()
        assert checker.wait_for(len(senders.sent), timeout=120), "the next owners caught up"
        checker.stop()
        codes = p.stop()
        assert all(code == 0 for code in codes.values()), codes
        assert p.stopped_at is not None
        send, receive = read_sides(p.settings, p.stopped_at)
        r = verify(senders.sent, receive.records)
        assert r.received == r.sent > 200
        assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0,) * 5
        assert first_copies(send.records)[1] == 0, "duplicates on the transfer topic"
    p.cleanup()
