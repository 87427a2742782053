"""Strays (docs/explanation/waiting-room.md#strays) under races: the stray check neither opens
a group under a replayed park nor fails to run (traffic flowing, another cell busy, a room
partition the unit has read nothing of). Each test failed against the first version of the
check (an adversarial review). In-process units against the real broker and Redis."""

from __future__ import annotations

import threading
import time

import redis
from confluent_kafka import Producer, TopicPartition

from router import contract
from router.config import RouterSettings
from router.contract import headers_for
from router.table import room
from router.table.routing import RouteRequest
from router.topology.cells import room_partition
from router.topology.side import table_for
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.inprocess import read_records, room_unit, send, step_until, stop
from tests.fixtures.strays import one_lane, park_and_abort


def test_a_replayed_park_after_the_stray_check_is_not_released_under_it(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """X parks an ordinary message M of the lane (counted: '~lane' parks=1) and its unit dies;
    X's park lease expires. '~lane' is admitted with no record: a stray, the drain makes its
    Check (parks 1, no lease, end e). X's replay Y routes M again under Y's lease, parks M at
    an offset >= e, commits and settles (its lease gone) while the drain's batch Z, at a
    position >= e but before it polled M, carries the Check's drain. A replay counted nothing,
    so Z's settle saw parks == 1 and no lease and released '~lane', and M, read next, was
    dead-lettered (group-entry-missing). A replay into an admitted group now counts."""
    s = one_lane(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    lane = f"{q}/0"
    table = table_for(s, "send", redis_client)
    unit = room_unit(s)
    drain = unit.steps.room
    pseudo = room.ordinary_group(lane)
    request = RouteRequest(None, False, 600_000, f"{lane}/90", lane)
    try:
        send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
        step_until(unit, lambda: "A" in table.entries(), 60, "A open")
        assert table.route([request], batch="x").decisions == [room.WAIT]  # X: counted, aborted
        table.expire_leases(now_ms=table.now_ms() + 3_600_000)  # X's unit died: lease ran out
        # B waits behind '~lane' (its records make the unit read the room partition)
        send(
            boot,
            q,
            [(0, b"B0", headers_for("B", seq=0)), (0, b"B1", headers_for("B", seq=1, final=True))],
        )
        step_until(unit, lambda: "B" in drain.index.gids(), 60, "B parked and read")
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        step_until(unit, lambda: table.admitted() == {pseudo: "0"}, 60, "the stray admitted")

        real_emit = drain.emit
        injected: list[bool] = []

        def emit(batch, out, now_ms):  # type: ignore[no-untyped-def]
            if pseudo in drain.checks and not injected:
                injected.append(True)
                # Y: the replay of X, routed after the drain's check: counted again, the
                # group being admitted (room.py `park`), so the check's count is stale
                assert table.route([request], batch="y").decisions == [room.WAIT]
                assert table.entries()[pseudo].parks == 2
                p = Producer({"bootstrap.servers": boot})
                p.produce(
                    s.topology.room_topic("send"),
                    b"M",
                    partition=0,
                    headers=[
                        (contract.ROOM, pseudo.encode()),
                        (contract.TOKEN, f"{lane}/90".encode()),
                    ],
                )
                assert p.flush(10) == 0
                real_emit(batch, out, now_ms)  # Z: polled before M was appended
                table.settle("y", [], [])  # Y committed: its lease ends before Z settles
                return
            real_emit(batch, out, now_ms)

        drain.emit = emit  # type: ignore[method-assign]
        step_until(unit, lambda: bool(injected), 30, "the stray's check")

        def dead() -> list[bytes]:  # the reasons of the dead letters of M (its source offset 90)
            return [dict(h)["reason"] for v, h in read_records(boot, s.topology.dead_letter_topic)]

        def delivered() -> list[bytes]:
            return [v for v, _ in read_records(boot, s.topology.transfer_topic) if v is not None]

        step_until(unit, lambda: b"M" in delivered() or bool(dead()), 30, "M handled")
        assert not dead(), f"M dead-lettered: {dead()}"
        assert b"M" in delivered()
    finally:
        stop(unit)


def two_lanes(topology: TopologyFactory, cells: int = 1) -> RouterSettings:
    return topology(
        topology={
            "send_queue_count": 1,
            "send_queue_partitions": 2,
            "receive_units": 2,
            "cells": cells,
        },
        routing={"busy_policy": "wait", "room_partitions": 2},
        unit={"batch_size": 50},
    )


RATE = 5  # per 10 ms: about 500 messages/s of F


def test_strays_are_found_while_other_traffic_flows(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """The stray check ran only from `Drain.due()`, which the run loop asks only when a
    poll returned nothing: while other traffic flowed the stray held its destination, and
    the group behind it waited. It runs from the drain's emit too."""
    s = two_lanes(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    lane0 = f"{q}/0"
    table = table_for(s, "send", redis_client)
    unit = room_unit(s, partitions=4)
    pseudo = room.ordinary_group(lane0)
    stop_traffic = threading.Event()
    try:
        # F streams on partition 1 for the whole test; A opens on the other destination
        send(boot, q, [(1, b"F0", headers_for("F", seq=0))])
        step_until(unit, lambda: "F" in table.entries(), 60, "F open")
        send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
        step_until(unit, lambda: "A" in table.entries(), 60, "A open")
        assert table.entries()["A"].dest != table.entries()["F"].dest
        park_and_abort(table, lane0)
        a_dest = table.entries()["A"].dest

        def traffic() -> None:
            p = Producer({"bootstrap.servers": boot, "linger.ms": 0})
            seq = 1
            while not stop_traffic.is_set():
                for _ in range(RATE):
                    p.produce(q, b"F", partition=1, headers=headers_for("F", seq=seq))
                    seq += 1
                p.poll(0)
                time.sleep(0.01)
            p.flush(10)

        t = threading.Thread(target=traffic, daemon=True)
        t.start()
        step_until(unit, lambda: (table.stats().get("messages") or 0) > 50, 30, "F flowing")
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        step_until(unit, lambda: table.admitted() == {pseudo: a_dest}, 60, "the stray admitted")
        # C on the stray's room partition: the unit reads it (its position there is valid)
        c = next(
            g
            for g in (f"C{i}" for i in range(100))
            if room_partition(g, 2) == room_partition(pseudo, 2)
        )
        send(
            boot,
            q,
            [(0, b"C0", headers_for(c, seq=0)), (0, b"C1", headers_for(c, seq=1, final=True))],
        )
        step_until(unit, lambda: c in unit.steps.room.index.gids(), 30, "C parked and read")
        # promised: looked for every STRAYS_S (1 s); give it 8 s while F flows
        drain = unit.steps.room
        calls: list[float] = []
        real_find = drain._find_strays

        def find() -> None:
            calls.append(time.monotonic())
            real_find()

        drain._find_strays = find  # type: ignore[method-assign]
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and pseudo in table.entries():
            unit.step()
        held = pseudo in table.entries()
        strays = unit.metrics.get("room_strays")
        stop_traffic.set()
        t.join(10)
        assert not held, (
            f"the stray still holds {a_dest} after 8 s of traffic ({len(calls)} looks for strays, "
            f"room_strays={strays})"
        )
    finally:
        stop_traffic.set()
        stop(unit)


def test_a_cells_strays_are_found_while_another_cell_has_a_waiting_group(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """`CellRoom.due()` was `any(d.due() for d in cells)`: while cell 0's drain was busy (a
    group waiting in its room) and due at every idle poll, cell 1's `due()` (which looks
    for strays) was never called. Every cell's is called now."""
    s = two_lanes(topology, cells=2)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    lane1 = f"{q}/1"
    t0 = table_for(s, "send", redis_client, 0)
    t1 = table_for(s, "send", redis_client, 1)
    unit = room_unit(s, partitions=4)
    pseudo = room.ordinary_group(lane1)
    try:
        # cell 0: A holds its only destination, B waits in cell 0's room (for good)
        send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
        step_until(unit, lambda: "A" in t0.entries(), 60, "A open")
        send(boot, q, [(0, b"B0", headers_for("B", seq=0))])
        step_until(unit, lambda: "B" in t0.room(), 60, "B waiting")
        # cell 1: the stray of test_stray_admissions
        send(boot, q, [(1, b"D0", headers_for("D", seq=0))])
        step_until(unit, lambda: "D" in t1.entries(), 60, "D open")
        park_and_abort(t1, lane1)
        send(boot, q, [(1, b"D1", headers_for("D", seq=1, final=True))])
        step_until(unit, lambda: pseudo in t1.admitted(), 60, "the stray admitted")
        send(
            boot,
            q,
            [(1, b"E0", headers_for("E", seq=0)), (1, b"E1", headers_for("E", seq=1, final=True))],
        )

        def delivered() -> list[bytes]:
            return [v for v, _ in read_records(boot, s.topology.transfer_topic, 2) if v is not None]

        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and b"E1" not in delivered():
            for _ in range(20):
                unit.step()
        assert b"E1" in delivered(), (
            f"E still waits behind the stray after 8 s: {t1.admitted()}, "
            f"room_strays={unit.metrics.get('room_strays')}"
        )
    finally:
        stop(unit)


def test_a_stray_on_a_room_partition_not_read_since_the_assignment_is_released(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """test_stray_admissions without C: nothing is parked after the stray, so the unit
    never consumes a record of its room partition, and `position()` stays OFFSET_INVALID
    until one is: the Check never passed. The position is then the committed offset
    (router/unit/steps/drain/positions.py)."""
    s = one_lane(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    lane = f"{q}/0"
    table = table_for(s, "send", redis_client)
    unit = room_unit(s)
    drain = unit.steps.room
    pseudo = room.ordinary_group(lane)
    try:
        send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
        step_until(unit, lambda: "A" in table.entries(), 60, "A open")
        park_and_abort(table, lane)
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        step_until(unit, lambda: table.admitted() == {pseudo: "0"}, 60, "the stray admitted")
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and pseudo in table.entries():
            unit.step()
        pos = unit.source.consumer.position([TopicPartition(s.topology.room_topic("send"), 0)])
        assert pseudo not in table.entries(), (
            f"stray still admitted after 8 s: checks={drain.checks}, room position={pos}, "
            f"room_strays={unit.metrics.get('room_strays')}"
        )
    finally:
        stop(unit)


def test_a_stray_is_released_by_a_unit_that_took_over_a_drained_room_partition(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """The realistic form of the one above: the room partition had records, all drained and
    their low mark committed; a new unit takes it over (restart, rebalance) and reads nothing
    there. Its catch-up waited for a valid position >= the end offset: the partition stayed
    in catch_up, and the stray was never even checked."""
    s = one_lane(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    lane = f"{q}/0"
    table = table_for(s, "send", redis_client)
    pseudo = room.ordinary_group(lane)
    unit = room_unit(s)
    try:
        send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
        step_until(unit, lambda: "A" in table.entries(), 60, "A open")
        send(
            boot,
            q,
            [(0, b"B0", headers_for("B", seq=0)), (0, b"B1", headers_for("B", seq=1, final=True))],
        )
        step_until(unit, lambda: "B" in table.room(), 60, "B waiting")
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        step_until(unit, lambda: table.entries() == {}, 60, "B drained and released")
        send(boot, q, [(0, b"G0", headers_for("G", seq=0))])  # a batch commits the low mark
        step_until(unit, lambda: "G" in table.entries(), 60, "G open")
        for _ in range(20):
            unit.step()
    finally:
        stop(unit)
    # X: an ordinary message parked while G holds the destination, aborted, its lease ended
    park_and_abort(table, lane)
    unit = room_unit(s)  # takes the partitions over
    drain = unit.steps.room
    try:
        send(boot, q, [(0, b"G1", headers_for("G", seq=1, final=True))])
        step_until(unit, lambda: table.admitted() == {pseudo: "0"}, 60, "the stray admitted")
        batches = unit._batches
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and pseudo in table.entries():
            unit.step()
        pos = unit.source.consumer.position([TopicPartition(s.topology.room_topic("send"), 0)])
        assert pseudo not in table.entries(), (
            f"stray still admitted after 8 s ({unit._batches - batches} drain-only batches): "
            f"catch_up={drain.catch_up}, checks={drain.checks}, "
            f"room position={pos[0].offset}, room_strays={unit.metrics.get('room_strays')}"
        )
    finally:
        stop(unit)
