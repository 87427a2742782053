"""A topology with three cells (issue 30, item 3; docs/explanation/cells.md) on the one Redis of
the test stack: separate unit processes, groups and ordinary messages from several senders,
judged from the queues alone (nothing lost, duplicated, reordered or split, no interleaving the
default policy does not allow), and every cell's tables used on both sides: each share of the
send-queue and transfer partitions was routed through its own cell's table."""

from __future__ import annotations

from typing import Any

from ops.harness.scenarios.demo_run import run_pipeline_workload, summary
from ops.harness.stack.pipeline import PipelineSpec
from ops.harness.traffic.workload import WorkloadSpec
from router.backends.redis.client import redis_client
from router.topology import cells
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory

SPEC = PipelineSpec(
    send_units=2,
    receive_units=2,
    send_queue_partitions=3,
    transfer_partitions=6,
    receive_queues=6,
    extra_env={"ROUTER_TOPOLOGY__CELLS": "3"},
)


def test_three_cells_route_every_group_whole_through_their_own_tables(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(SPEC)
    s = p.settings
    assert s.topology.cells == 3
    workload = WorkloadSpec(run_id=p.name, senders=3, messages=1500, rate=150, max_group=20)
    result = run_pipeline_workload(p, workload, say=lambda _: None, timeout=120)
    r = result.report
    text = "\n".join(summary(result))
    print(text)
    assert r.groups_sent >= 30 and r.ordinary_sent > 0, text
    assert r.sent == workload.messages and r.received == r.sent, text
    assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
    assert r.groups_complete == r.groups_sent, text
    assert all(code == 0 for code in result.exit_codes.values()), result.exit_codes
    assert not result.sender_failures and not result.undecodable, text
    assert r.send is not None and r.receive is not None, "both sides judged"
    assert r.send.records == r.receive.records == r.sent, text
    assert result.violations == [], text
    # every cell's table on each side routed its share: the messages its route calls counted
    client: Any = redis_client(s.redis)
    routed: dict[tuple[str, int], int] = {}
    for side in ("send", "receive"):
        for cell in cells.all_cells(s):
            keys = table_for(s, side, client, cell).keys
            tag = cells.tag(s.topology.name, cell)
            assert keys.stats == f"{s.redis.key_prefix}:{{{tag}:{side}}}:stats"
            routed[(side, cell)] = int(client.hget(keys.stats, "messages") or 0)
    print("messages routed per (side, cell):", routed)
    assert all(n > 0 for n in routed.values()), routed
    for side in ("send", "receive"):
        assert sum(routed[(side, c)] for c in range(3)) >= r.sent, routed
