"""Three cells on the 3-primary Redis Cluster (issue 30, item 3; docs/explanation/cells.md):
each cell's tables on a slot of their own, the three cells of a side on three different
primaries, and grouped traffic through separate unit processes judged from the queues.

Where a cell's slot lands follows from its key tag (`{<topology>/<c>:<side>}`) like any key's:
an operator checks it with `CLUSTER KEYSLOT` and `CLUSTER SLOTS` (`make cluster-status`) and
either moves slots (`redis-cli --cluster reshard`) or, for a new topology, chooses its name.
This test does the latter: it picks a topology name whose cells' slots fall in three
different primaries' ranges, then checks with the nodes themselves that they do."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stack.rediscluster import ClusterSet
from ops.harness.traffic.collect import verdict
from router.config import KafkaSettings, RouterSettings
from router.table.store.codec import TableKeys
from router.topology import cells
from tests.fixtures.judged import Arrivals, assert_whole, finish, send

pytestmark = pytest.mark.slow

CELLS = 3
SPEC = PipelineSpec(
    send_units=1,
    receive_units=1,
    send_queues=1,
    send_queue_partitions=3,
    transfer_partitions=3,
    receive_queues=3,
    extra_env={"ROUTER_TOPOLOGY__CELLS": str(CELLS)},
)
PREFIX = "router-test"


def ranges(cluster: ClusterSet) -> list[tuple[int, int, int]]:
    """(first slot, last slot, primary's port) of each slot range, as a node says."""
    for node in range(1, 7):
        try:
            slots: Any = cluster.node_client(node).execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
        except Exception:
            continue
        return [(int(a), int(b), int(primary[1])) for a, b, primary, *_ in slots]
    raise RuntimeError("no node of the cluster answers")


def primaries(name: str, side: str, slot_ranges: list[tuple[int, int, int]]) -> list[int]:
    """The port of the primary holding each cell's table of `side`, for topology `name`."""
    out = []
    for c in range(CELLS):
        slot = key_slot(TableKeys.of(PREFIX, cells.tag(name, c), side).entries.encode())  # type: ignore[arg-type]
        out += [port for a, b, port in slot_ranges if a <= slot <= b]
    return out


def spread_name(slot_ranges: list[tuple[int, int, int]]) -> str:
    """A topology name whose cells, on each side, are on three different primaries."""
    for _ in range(10_000):
        name = f"cells-{secrets.token_hex(3)}"
        if all(len(set(primaries(name, s, slot_ranges))) == CELLS for s in ("send", "receive")):
            return name
    raise AssertionError("no name spreads the cells over the primaries")


@pytest.fixture
def spread_pipeline(
    whole_cluster: ClusterSet, kafka_bootstrap: str, tmp_path: Path
) -> Iterator[Pipeline]:
    name = spread_name(ranges(whole_cluster))
    settings = RouterSettings(
        kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
        redis=whole_cluster.redis_settings(key_prefix=PREFIX),
    )
    p = Pipeline(settings, SPEC, tmp_path / "cells", name=name)
    try:
        p.start(ready_timeout=90)
        yield p
    finally:
        p.stop()
        p.cleanup()


def test_three_cells_on_three_primaries(
    spread_pipeline: Pipeline, whole_cluster: ClusterSet
) -> None:
    p = spread_pipeline
    s = p.settings
    assert s.topology.cells == CELLS
    arrivals = Arrivals(p)
    try:
        sent = send(p, "a", 400)
        assert arrivals.wait_for(len(sent.sent), 90), f"{arrivals.count()} of 400 arrived"
    finally:
        arrivals.stop()
    for side in ("send", "receive"):
        owners = []
        for c in range(CELLS):
            keys = TableKeys.of(PREFIX, cells.tag(s.topology.name, c), side)
            assert len({whole_cluster.keyslot(k) for k in keys.all()}) == 1  # one slot a table
            node = whole_cluster.owner(keys.stats)
            assert node is not None
            owners.append(node)
            direct: Any = whole_cluster.node_client(node)
            # routed there, answered by that primary itself (no MOVED): the cell was used
            assert int(direct.hget(keys.stats, "messages") or 0) > 0, (side, c)
        assert len(set(owners)) == CELLS, f"{side}: cells on nodes {owners}"
    send_side, receive = finish(p)
    assert_whole(verdict(sent.sent, send_side, receive), 400)
