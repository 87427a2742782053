"""The short chaos run inside `make test` (the long one is `make chaos`).

Tens of thousands of messages; at least 10 kill events (SIGKILL from outside at random
moments, and replacements armed to kill themselves exactly between routing and producing,
producing and committing, or committing and releasing); one broker restart and one Redis
restart; then the units are stopped and every destination of both sides (transfer topic,
receive queues) is read from the start to its end with read_committed, once the transaction
timeout has passed. Nothing lost, duplicated, reordered or split; no unit exit that was not
a kill, an armed fault injection or a unit's own exit over a consumer that librdkafka left
with no broker (librdkafka#5301, restarted like any); no interleaving the capacity rule does
not allow. ChaosSpec's QoS shares are in every run: 5 % of the ordinary messages multicast
(each once on each of its queues) and 5 % of the messages with a lifetime (each delivered,
or expired with one ExpiredMessage event, never both: `check_qos`); and with 3 priority
bands, 10 % of the ordinary messages and of the groups carry a `message-priority` (a group's
later members other ones, which the router must ignore): every band topic of both sides is
read, each group whole on ONE band topic of ONE queue, every record on the band its priority
(a group's first member's) maps to, interleavings judged over each destination's band topics
merged by append time (`check_priority`). On a private stack, so the restarts disturb
nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ops.harness.scenarios.chaos_result import ChaosResult, summary
from ops.harness.scenarios.chaos_run import ChaosSpec, run_chaos
from ops.harness.stack.localstack import LocalStack
from router.config import RouterSettings

pytestmark = pytest.mark.slow


def check_qos(result: ChaosResult, spec: ChaosSpec, report: str) -> None:
    """The shares were sent and judged: every message delivered or expired (none dead-
    lettered), each multicast copy counted as a delivery of its own."""
    r, a = result.report, result.report.accounts
    assert a is not None, "the events and dead-letter topics were read"
    assert r.sent - r.multicast_copies + r.multicast_sent == spec.messages, report
    assert r.multicast_sent > 0 and r.multicast_copies > r.multicast_sent, report
    assert a.expiring_sent > 0 and a.expired > 0 and a.expiring_delivered > 0, report
    assert a.expiring_delivered + a.expired == a.expiring_sent, report
    assert r.received + a.expired == r.sent and a.dead_lettered == 0, report
    assert r.send is not None
    assert r.send.records == spec.messages - a.expired_by_hop["SEND_UNIT"], report


def check_priority(result: ChaosResult, spec: ChaosSpec, report: str) -> None:
    """The priority share was sent and landed on every band, none on a wrong band, no
    group over two band topics."""
    b = result.report.bands
    assert b is not None and b.bands == spec.bands, report
    assert b.prioritised > 0 and b.prioritised_groups > 0, report
    assert all(b.landed[band] > 0 for band in range(spec.bands)), report
    assert (sum(b.wrong.values()), b.wrong_groups, b.split) == (0, 0, 0), report


def test_short_chaos_run_loses_duplicates_reorders_and_splits_nothing(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path
) -> None:
    # policy share, the explicit choice (the default, wait, is the next test's)
    spec = ChaosSpec(
        messages=20_000,
        senders=4,
        rate=200.0,
        kills=12,
        seed=7,
        catch_up_s=240,
        busy_policy="share",
    )
    lines: list[str] = []
    result = run_chaos(private_settings, private_stack, spec, tmp_path, say=lines.append)
    report = "\n".join(lines + summary(result))
    print(report)  # shown with pytest -rP
    r = result.report
    assert (r.lost, r.duplicated, r.reordered, r.split_groups, r.unexpected) == (0, 0, 0, 0, 0), (
        report
    )
    assert r.groups_complete == r.groups_sent, report
    check_qos(result, spec, report)
    check_priority(result, spec, report)
    assert result.kills >= 10, report
    assert result.restarts == {"kafka": 1, "redis": 1}, report
    assert not result.sender_failures and not result.undecodable, report
    assert result.crashes == [], report
    assert r.send is not None and r.receive is not None, "both sides judged"
    assert result.violations() == [], report  # unexpected exits, disallowed interleavings


# The whole-group variant runs with `make test-chaos` (ROUTER_TEST_CHAOS=1), beside the
# streamed one: 1.5 min that `make test` (35 min on CI's two cores) cannot spare. Whole
# groups under kills stay in make test through test_whole_groups_through_units.
WHOLE = pytest.param(
    "complete",
    marks=pytest.mark.skipif(
        not os.environ.get("ROUTER_TEST_CHAOS"), reason="whole groups: run by make test-chaos"
    ),
)


@pytest.mark.parametrize("delivery", ["stream", WHOLE])
def test_short_chaos_run_under_the_waiting_room_interleaves_nothing(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path, delivery: str
) -> None:
    """The same faults under policy `wait`, with three times more groups open than
    destinations on either side: besides the above, not one interleaving; and the same
    with every group whole (staged until its final, then written in one transaction).
    The streaming run has 3 priority bands; the whole-group run one (the priority headers
    are still sent, all in band 0). These runs found the waiting-room stall: leases of
    batches that never settle kept destinations unclean once nothing was routed any more,
    until the sweeper ended them (docs/explanation/priority.md, known limits); and, until
    issue 29, one interleaving in 2 of 8 streamed runs (see below)."""
    spec = ChaosSpec(
        delivery=delivery,
        bands=3 if delivery == "stream" else 1,
        messages=5_000,
        senders=4,
        rate=150.0,
        kills=8,
        seed=11,
        busy_policy="wait",
        transfer_partitions=3,
        receive_queues=3,
        open_per_sender=3,
        catch_up_s=240,
    )
    lines: list[str] = []
    result = run_chaos(private_settings, private_stack, spec, tmp_path, say=lines.append)
    report = "\n".join(lines + summary(result))
    print(report)  # shown with pytest -rP
    r = result.report
    assert (r.lost, r.duplicated, r.reordered, r.split_groups, r.unexpected) == (0, 0, 0, 0, 0), (
        report
    )
    assert r.groups_complete == r.groups_sent, report
    check_qos(result, spec, report)
    check_priority(result, spec, report)
    assert result.kills >= 6, report
    assert result.restarts == {"kafka": 1, "redis": 1}, report
    assert result.crashes == [], report
    assert r.send is not None and r.receive is not None, "both sides judged"
    assert r.violations() == [], report
    assert not result.sender_failures and not result.undecodable, report
    # Not one interleaving, allowed by the capacity rule or not. Three causes were fixed in
    # issue 29: a wait time-out shared the group (or a lane's ordinary messages) onto a busy
    # destination (the default is now to report it and keep waiting), one transaction's
    # records on a destination's band topics were appended out of the decided order, and an
    # aborted chained drain was written again with its head, drained in part before, last
    # (tests/unit/unit/steps/drain/test_chain_replay_order.py).
    interleaved = (r.send.interleaved, r.receive.interleaved)
    assert interleaved == (0, 0), (
        f"{report}\n{room_timeouts(tmp_path)} groups timed out of the room by the sweepers"
    )
    assert result.violations() == [], report


def room_timeouts(run_dir: Path) -> int:
    """Groups the sweepers reported (or shared, or dead-lettered) for waiting too long in
    the room, as their logs say (each also has a GroupWaitTimedOut event): an explanation
    for a failed waiting-room run, never an excuse."""
    return sum(
        log.read_text(errors="replace").count("in the room: ")
        for log in run_dir.rglob("sweeper-*.log")
    )
