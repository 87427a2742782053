"""A guarantee ID reused after a chain whose settle was lost, through real units (policy
`wait`), judged from what the destination holds (read_committed).

One send-queue partition, one destination. A holds it while H and C (complete) and an
ordinary message park; A's final frees it and the drain writes H with C and the lane
chained behind it. The unit dies after that batch committed and before the table's release
(`after_commit`): the next owner finds H and C open and closing on the one destination,
until the sweeper releases them. A sender then reuses both IDs, their messages interleaved
on the lane. Before the fix (`router.table.room.crowds`, `route.lua`), the reused H went
straight to the destination that still carried the old C, and the new groups interleaved
there; now each waits until the old groups' release and is written whole."""

from __future__ import annotations

import time
from typing import Any

import redis

from router.config import RouterSettings
from router.contract import headers_for
from router.sweeper.loop import Sweeper
from router.table import room
from router.topology.side import table_for
from router.unit.loop import TransferUnit
from tests.fixtures.chains import park_h_c_and_o, spy_emit
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.inprocess import committed, read_records, room_unit, send, step_until, stop


def settings(topology: TopologyFactory) -> RouterSettings:
    return topology(
        topology={"send_queue_count": 1, "send_queue_partitions": 1, "receive_units": 1},
        routing={"busy_policy": "wait", "room_partitions": 1},
        unit={"batch_size": 50},
        sweeper={"closing_grace_ms": 500},
    )


def lose_the_chains_release(unit: TransferUnit) -> list[Any]:
    """`unit`'s chain batch commits, and its release never runs (the unit died between the
    two). Returns the outputs whose release was lost."""
    outs = spy_emit(unit)
    real = unit.steps.release
    lost: list[Any] = []

    def release(batch: Any, out: Any) -> None:
        if out.chained or lost:
            lost.append(out)
            batch.extra["release"] = None  # the run loop's settle must not run it either
            return
        real(batch, out)

    unit.steps.release = release  # type: ignore[method-assign]
    assert outs is not None
    return lost


def values(records: list[tuple[bytes | None, Any]]) -> list[bytes]:
    return [v for v, _ in records if v is not None]  # drain markers have no value


def groups_whole(got: list[bytes]) -> None:
    """Every value once; each group (by its value's prefix before the digit) contiguous and
    in order, where a reused ID's new group is spelled with a quote ("H'0")."""
    assert len(got) == len(set(got)), got
    spans: dict[bytes, list[int]] = {}
    for i, v in enumerate(got):
        if v[:1] != b"o":
            spans.setdefault(v[:-1], []).append(i)
    for g, at in spans.items():
        assert at == list(range(at[0], at[0] + len(at))), (g, got)
        assert [got[i] for i in at] == sorted(got[i] for i in at), (g, got)


def test_ids_reused_after_a_chain_whose_release_was_lost_are_written_whole(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    s = settings(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    table = table_for(s, "send", redis_client)
    u1 = room_unit(s)
    park_h_c_and_o(s, u1, redis_client)
    lost = lose_the_chains_release(u1)
    send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
    try:
        step_until(u1, lambda: bool(lost), 60, "the chain committed")
    finally:
        u1.source.consumer.close()  # dead: it leaves the group, its release never ran
    u2 = room_unit(s)
    try:
        step_until(
            u2,
            lambda: all(
                table.entries().get(g) is not None and table.entries()[g].state == room.OPEN
                for g in ("H", "C")
            ),
            60,
            "the next owner opens H and C, still closing on the destination",
        )
        send(boot, q, [
            (0, b"H'0", headers_for("H", seq=0)),
            (0, b"C'0", headers_for("C", seq=0)),
            (0, b"H'1", headers_for("H", seq=1, final=True)),
            (0, b"C'1", headers_for("C", seq=1, final=True)),
            (0, b"o2", headers_for(None)),
        ])  # fmt: skip
        step_until(
            u2,
            lambda: bool(u2.holds) or committed(s.kafka, s.topology.send_group, q, 0) == 12,
            60,
            "the reused IDs routed, or their lane held",
        )
        sweeper = Sweeper(s, redis_client=redis_client)  # only now: the old H and C open
        rounds = [0.0]

        def delivered() -> bool:
            if time.monotonic() - rounds[0] > 1:
                rounds[0] = time.monotonic()  # the old H and C released once their finals'
                sweeper.run_once()  # offsets are committed and the grace has passed
                return len(values(read_records(boot, s.topology.transfer_topic))) == 12
            return False

        step_until(u2, delivered, 90, "every message on the destination")
        step_until(u2, lambda: not table.entries(), 60, "every group released")
    finally:
        stop(u2)
    got = values(read_records(boot, s.topology.transfer_topic))
    print("GOT", got)
    assert sorted(got) == sorted(
        [b"A0", b"A1", b"H0", b"H1", b"C0", b"C1", b"o", b"H'0", b"H'1", b"C'0", b"C'1", b"o2"]
    )
    groups_whole(got)
