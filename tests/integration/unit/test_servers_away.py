"""Redis or the broker away for several seconds mid-run: units forward nothing without the
table, back off, log it, and resume by themselves (`tests.fixtures.outage`); SIGTERM is
honoured while the broker is away. On a private stack, so stopping servers disturbs
nothing else. The broker away under traffic for the same checks takes most of a minute
(librdkafka's offsets call can block past its time-out after a broker restart, until the
unit abandons it): it runs with `make test-faults`
(tests/integration/faults/test_broker_outage.py); the short chaos run in `make test`
restarts the broker under traffic too.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.pipeline import Pipeline
from ops.harness.traffic.collect import read_sides
from ops.harness.traffic.progress import Collector
from ops.harness.traffic.senders import Senders
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.records import first_copies
from ops.harness.verdict.verify import verify
from router.config import RouterSettings
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.outage import SPEC, run_with_outage

pytestmark = pytest.mark.slow

STUCK_S = 3.0


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
