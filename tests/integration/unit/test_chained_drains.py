"""Chained drains under faults (`docs/explanation/waiting-room.md#chained-drains`), in-process
units against the real broker and Redis.

One send-queue partition, one destination (transfer partition 0), one room partition: A
holds the destination while H (2 messages), C (2) and an ordinary message park; A's final
frees it, H is admitted and the drain forwards H whole with C and the lane's ordinary
message chained behind it. Each test disturbs that chain batch differently."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from router import contract
from router.config import RouterSettings
from router.contract import headers_for
from router.table import room
from router.topology.side import side_spec, table_for
from router.unit.loop import TransferUnit
from router.unit.steps.drain import chaining
from tests.fixtures.chains import h_c_and_o, park_h_c_and_o, spy_emit
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.inprocess import (
    committed,
    read_records,
    room_unit,
    send,
    step_until,
    stop,
)


def settings(topology: TopologyFactory) -> RouterSettings:
    return topology(
        topology={"send_queue_count": 1, "send_queue_partitions": 1, "receive_units": 1},
        routing={"busy_policy": "wait", "room_partitions": 1},
        unit={"batch_size": 50},
    )


def transfer(s: RouterSettings) -> list[tuple[bytes | None, dict[str, bytes]]]:
    return [
        (v, dict(h)) for v, h in read_records(s.kafka.bootstrap_servers, s.topology.transfer_topic)
    ]


def read_uncommitted(bootstrap: str, topic: str) -> list[bytes | None]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("ru"),
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes | None] = []
    try:
        while True:
            m = c.poll(10)
            assert m is not None
            if m.error() is not None:
                return out
            out.append(m.value())
    finally:
        c.close()


def end_a(s: RouterSettings) -> None:
    """A's final: the only destination frees, and the room's groups are admitted."""
    send(
        s.kafka.bootstrap_servers,
        s.topology.send_queues[0],
        [(0, b"A1", headers_for("A", seq=1, final=True))],
    )


def values(held: list[tuple[bytes | None, dict[str, bytes]]]) -> list[bytes | None]:
    return [
        v if v is not None else b"<" + h.get(contract.GUARANTEE_ID, b"?") + b" marker>"
        for v, h in held
    ]


EXPECTED = [b"A0", b"A1", b"C0", b"C1", b"o", b"H0", b"H1"]  # C and H tie: by ID


def whole_and_once(got: list[bytes | None]) -> None:
    """Each value once; each group's records adjacent and in order (judged on values)."""
    assert sorted(got, key=repr) == sorted(EXPECTED, key=repr), got
    for g in (b"A", b"C", b"H"):
        at = [i for i, v in enumerate(got) if v is not None and v.startswith(g)]
        assert at == list(range(at[0], at[0] + len(at))), (g, got)
        assert [got[i] for i in at] == sorted(got[i] for i in at), (g, got)


def finish(s: RouterSettings, unit: TransferUnit, r: redis.Redis) -> None:
    table = table_for(s, "send", r)
    step_until(unit, lambda: not table.entries(), 90, "every group released")


def test_baseline_the_chain_happens(topology: TopologyFactory, redis_client: redis.Redis) -> None:
    s = settings(topology)
    unit = room_unit(s)
    try:
        park_h_c_and_o(s, unit, redis_client)
        outs = spy_emit(unit)
        end_a(s)
        finish(s, unit, redis_client)
    finally:
        stop(unit)
    assert any(o.chained == 2 for o in outs), [o.chained for o in outs]
    whole_and_once(values(transfer(s)))


def test_the_chain_batch_aborts_and_is_replayed(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """The chain batch's records reach the broker, then its transaction fails: the retry
    writes H, the lane and C again, once, each whole."""
    s = settings(topology)
    unit = room_unit(s)
    try:
        park_h_c_and_o(s, unit, redis_client)
        outs = spy_emit(unit)
        real_commit = unit.session.commit
        failed: list[int] = []

        def commit(*a: Any, **k: Any) -> None:
            if outs and outs[-1].chained and not failed:
                failed.append(1)
                unit.session.producer.flush(10)  # on the broker, in the open transaction
                raise unit.session.fail("injected: the chain batch's transaction fails")
            real_commit(*a, **k)

        unit.session.commit = commit  # type: ignore[method-assign]
        end_a(s)
        finish(s, unit, redis_client)
    finally:
        stop(unit)
    assert failed
    got = values(transfer(s))
    print("ABORT", got)
    whole_and_once(got)
    dirty = read_uncommitted(s.kafka.bootstrap_servers, s.topology.transfer_topic)
    assert dirty.count(b"C1") == 2  # the aborted attempt did write the chain


class Killed(Exception):
    pass


def die_in_the_chain_commit(unit: TransferUnit) -> list[Any]:
    """`unit` dies in the commit of its next chain batch: the batch's records are on the
    broker, in its open transaction, and the commit raises `Killed`. The drain's outputs,
    spied."""
    outs = spy_emit(unit)
    real_commit = unit.session.commit

    def commit(*a: Any, **k: Any) -> None:
        if outs and outs[-1].chained:
            unit.session.producer.flush(10)  # on the broker, in the open transaction
            raise Killed
        real_commit(*a, **k)

    unit.session.commit = commit  # type: ignore[method-assign]
    return outs


def test_the_unit_dies_inside_the_chain_batch_and_another_takes_over(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """U1 writes the chain batch and dies with its transaction open (aborted by its
    timeout); U2 takes the partitions, rebuilds the room's index, and writes H, the lane
    and C once each."""
    s = settings(topology)
    u1 = room_unit(s)
    park_h_c_and_o(s, u1, redis_client)
    die_in_the_chain_commit(u1)
    end_a(s)
    with contextlib.suppress(Killed):
        step_until(u1, lambda: False, 60, "the chain batch")
    # dead: it leaves the group (its producer's transaction stays open until its timeout)
    u1.source.consumer.close()
    table = table_for(s, "send", redis_client)
    assert table.entries()["C"].state == room.ADMITTED  # chained, not committed
    u2 = room_unit(s)
    try:
        finish(s, u2, redis_client)
        wait_until(lambda: len(transfer(s)) > 2, 60, "U1's transaction aborted by its timeout")
    finally:
        stop(u2)
    got = values(transfer(s))
    print("KILL", got)
    whole_and_once(got)


def test_the_chain_scripts_reply_is_lost(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """chain.lua admitted C and the lane, but the reply timed out: the batch writes H only,
    and the next drain writes what the table admitted."""
    s = settings(topology)
    unit = room_unit(s)
    try:
        park_h_c_and_o(s, unit, redis_client)
        drain = unit.steps.room
        assert drain is not None
        real = drain.table.chain
        lost: list[Any] = []

        def chain(plan: Any, lanes: Any = ()) -> Any:
            got = real(plan, lanes)
            if not lost:
                lost.append(got)
                raise redis.TimeoutError("reply lost")
            return got

        drain.table.chain = chain  # type: ignore[method-assign]
        end_a(s)
        finish(s, unit, redis_client)
    finally:
        stop(unit)
    assert lost and lost[0]
    got = values(transfer(s))
    print("LOST", lost, got)
    whole_and_once(got)


def two_units(s: RouterSettings) -> tuple[TransferUnit, TransferUnit]:
    """(lane owner, room owner): two send units, one partition each."""
    units = []
    for _ in range(2):
        u = TransferUnit(s, side_spec(s, "send"))
        assert u.session.start()
        d = u.steps.room
        assert d is not None
        d.consumer = u.source.consumer
        u.source.subscribe([*u.spec.sources, d.topic], u._on_assign, u._on_revoke)
        units.append(u)
    deadline = time.monotonic() + 90
    while not all(len(u.source.assigned) == 1 for u in units):
        assert time.monotonic() < deadline, "assignment"
        for u in units:
            u.step()
    room_topic = s.topology.room_topic("send")
    lane, owner = sorted(units, key=lambda u: any(tp[0] == room_topic for tp in u.source.assigned))
    return lane, owner


def park_h_and_c_behind_a(s: RouterSettings, units: list[TransferUnit], table: Any) -> None:
    """A0 open on the only destination; H and C (2 messages each, complete) parked."""
    q, boot, group = s.topology.send_queues[0], s.kafka.bootstrap_servers, s.topology.send_group
    send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
    step_all(units, lambda: committed(s.kafka, group, q, 0) == 1, 60, "A0")
    send(boot, q, h_c_and_o()[:4])
    step_all(
        units,
        lambda: (
            committed(s.kafka, group, q, 0) == 5
            and set(table.room()) == {"H", "C"}
            and not any(st.leased for st in table.room_state(["H", "C"]).values())
        ),
        60,
        "H and C parked",
    )


def step_all(
    units: list[TransferUnit], done: Callable[[], bool], timeout: float, what: str
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out: {what}"
        for u in units:
            u.step()


@pytest.mark.parametrize("target", ["H", "C"])  # H: chained; C: the head (pre-existing)
def test_a_stop_routed_by_another_unit_lands_inside_the_chain(
    topology: TopologyFactory, redis_client: redis.Redis, target: str
) -> None:
    """The room owner's chain batch writes C (head) then H (chained) to the destination.
    Meanwhile the lane's owner routes a poison message reusing `target`'s ID (policy
    stop-group): route.lua stops the group, which chain.lua (H) or the admission (C) gave
    the destination, and the lane owner writes its close marker there in its own
    transaction while the chain batch's is open. Before the fix, its close marker landed
    between the group's two records on the destination, and the receive side, one record
    per batch, delivered the first and dead-lettered the final as an orphan
    (group-entry-missing). Now the stop parks the poison message in the room and the drain
    alone closes the group on its destination, after what it wrote of it."""
    s = settings(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    lane_owner, room_owner = two_units(s)
    units = [lane_owner, room_owner]
    table = table_for(s, "send", redis_client)
    group = s.topology.send_group
    try:
        park_h_and_c_behind_a(s, units, table)
        hooked: list[str] = []
        real_produce = room_owner.session.produce

        def produce(records: list[Any], track: Any = None, barriers: Any = ()) -> None:
            vals = [r.value for r in records]
            last = f"{target}1".encode()
            if last not in vals or hooked:
                return real_produce(records, track, barriers)
            k = vals.index(last)
            real_produce(records[:k], track, ())
            room_owner.session.producer.flush(10)  # C0 C1 H0 appended, transaction open
            hooked.append(f"chain batch: {vals}; {target} is {table.entries()[target].state}")
            poison = [*headers_for(target, on_poison="stop-group"), (contract.SEQ, b"x")]
            send(boot, q, [(0, b"H-reused", poison)])
            step_until(
                lane_owner,
                lambda: committed(s.kafka, group, q, 0) == 7 and lane_owner._inflight is None,
                60,
                "the lane owner routes the poison and commits",
            )
            real_produce(records[k:], track, ())

        room_owner.session.produce = produce  # type: ignore[method-assign]
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        step_all(
            units,
            lambda: (
                bool(hooked)
                and not table.loads()
                and not table.room()
                and all(e.state == room.OPEN for e in table.entries().values())
            ),
            90,
            "the chain batch committed and settled",
        )
    finally:
        for u in units:
            stop(u)
    got = values(transfer(s))
    print(hooked, got)
    t = target.encode()
    span = got[got.index(t + b"0") : got.index(t + b"1") + 1]
    print("SPAN", span)
    problems = []
    if span != [t + b"0", t + b"1"]:
        problems.append(f"inside {target}'s span on the destination: {span}")
    # What the receive side makes of it: H0 opens H on a queue, the close marker ends H
    # there, and H1 (a continuation, seq 1) finds no entry: an orphan, dead-lettered.
    rs = s.model_copy(update={"unit": s.unit.model_copy(update={"batch_size": 1})})
    recv = TransferUnit(rs, side_spec(rs, "receive"))
    assert recv.session.start()
    d = recv.steps.room
    assert d is not None
    d.consumer = recv.source.consumer
    recv.source.subscribe([*recv.spec.sources, d.topic], recv._on_assign, recv._on_revoke)
    probe = Consumer({"bootstrap.servers": boot, "group.id": unique("hw")})
    _, end = probe.get_watermark_offsets(TopicPartition(s.topology.transfer_topic, 0), 10)
    probe.close()
    try:
        step_until(
            recv,
            lambda: (
                committed(s.kafka, s.topology.receive_group, s.topology.transfer_topic, 0)
                >= end - 1
            ),
            60,
            "the receive side reads the transfer partition to its end",
        )
        for _ in range(20):
            recv.step()
    finally:
        stop(recv)
    queues = {qn: [v for v, _ in read_records(boot, qn)] for qn in s.topology.receive_queues}
    dead = read_records(boot, s.topology.dead_letter_topic)
    print("QUEUES", queues)
    reasons = [dict(h).get("reason") for _, h in dead]
    print("DEAD", reasons)
    delivered = [v for vs in queues.values() for v in vs]
    if t + b"1" not in delivered:
        problems.append(f"{target} cut downstream: queues {queues}, dead letters {reasons}")
    assert not problems, problems


def read_timed(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("rt"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            m = c.poll(10)
            assert m is not None
            if m.error() is not None:
                return out
            ts_type, ts = m.timestamp()
            out.append((ts_type, ts, m.value()))
    finally:
        c.close()


def test_a_chain_over_two_band_topics_is_appended_in_order(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """Priority bands: C (head) and the lane's ordinary message on band 1, H on band 0,
    the chain writes them to one destination over its two band topics: every record of
    the chain after the one before it by the broker's append time (the barriers)."""
    s = topology(
        topology={"send_queue_count": 1, "send_queue_partitions": 1, "receive_units": 1},
        routing={"busy_policy": "wait", "room_partitions": 1},
        unit={"batch_size": 50},
        priority={"bands": 2},
    )
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    hi = [("message-priority", b"9")]
    unit = room_unit(s, partitions=3)
    table = table_for(s, "send", redis_client)
    try:
        send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
        step_until(unit, lambda: committed(s.kafka, s.topology.send_group, q, 0) == 1, 60, "A0")
        send(boot, q, [
            (0, b"H0", headers_for("H", seq=0)),
            (0, b"H1", headers_for("H", seq=1, final=True)),
            (0, b"C0", [*headers_for("C", seq=0), *hi]),
            (0, b"C1", headers_for("C", seq=1, final=True)),
            (0, b"o", [*headers_for(None), *hi]),
        ])  # fmt: skip
        step_until(
            unit,
            lambda: (
                committed(s.kafka, s.topology.send_group, q, 0) == 6
                and len(table.room()) == 3
                and not any(st.leased for st in table.room_state(list(table.room())).values())
            ),
            60,
            "parked",
        )
        outs = spy_emit(unit)
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        finish(s, unit, redis_client)
    finally:
        stop(unit)
    assert any(o.chained == 2 for o in outs)
    b0 = read_timed(boot, s.topology.transfer_topic)
    b1 = read_timed(boot, f"{s.topology.transfer_topic}.p1")
    (chain,) = [o for o in outs if o.chained]
    rows = [(i, r.topic, r.value) for i, r in enumerate(chain.records) if r.value is not None]
    print("CHAIN", rows, "BARRIERS", chain.barriers)
    assert [v for _, _, v in b1] == [b"C0", b"C1", b"o"]
    assert [v for _, _, v in b0] == [b"A0", b"A1", b"H0", b"H1"]
    # the band changes from 1 to 0 at H0: every earlier record is appended first
    h0 = next(i for i, _, v in rows if v == b"H0")
    assert h0 in chain.barriers


def test_a_candidate_whose_park_batch_aborted_and_was_replayed_is_chained_once(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """The batch that parks H, C and o aborts after its records reached the broker (the
    table counted the parks); the replay parks them again (not counted twice). The chain
    then holds exactly the replayed copies."""
    s = settings(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    unit = room_unit(s)
    table = table_for(s, "send", redis_client)
    try:
        send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
        step_until(unit, lambda: committed(s.kafka, s.topology.send_group, q, 0) == 1, 60, "A0")
        batches: list[Any] = []
        real_emit = unit.steps.emit

        def emit(batch: Any, now_ms: int) -> Any:
            batches.append(batch)
            return real_emit(batch, now_ms)

        unit.steps.emit = emit  # type: ignore[method-assign]
        real_commit = unit.session.commit
        failed: list[int] = []

        def commit(*a: Any, **k: Any) -> None:
            vals = [i.m.value() for i in batches[-1].items]
            if b"C1" in vals and not failed:
                failed.append(1)
                unit.session.producer.flush(10)
                raise unit.session.fail("injected: the park batch fails")
            real_commit(*a, **k)

        unit.session.commit = commit  # type: ignore[method-assign]
        send(boot, q, h_c_and_o())

        def parked() -> bool:
            table.expire_leases()  # the sweeper's round: the aborted batch's leases end
            return (
                committed(s.kafka, s.topology.send_group, q, 0) == 6
                and len(table.room()) == 3
                and not any(st.leased for st in table.room_state(list(table.room())).values())
            )

        step_until(unit, parked, 60, "parked after the replay, leases ended")
        assert failed and table.entries()["C"].parks == 2
        outs = spy_emit(unit)
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        finish(s, unit, redis_client)
    finally:
        stop(unit)
    assert any(o.chained == 2 for o in outs)
    whole_and_once(values(transfer(s)))


def test_unchained_the_same_stop_finds_h_waiting_and_writes_nothing_to_the_destination(
    topology: TopologyFactory, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the H case above: chaining off, the poison reusing H's ID comes while
    C's drain batch is open. H is still waiting: stopped without a destination, no close
    marker written, its parked records dead-lettered whole (group-stopped)."""
    monkeypatch.setattr(chaining, "plan", lambda *a, **k: [])
    s = settings(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    lane_owner, room_owner = two_units(s)
    units = [lane_owner, room_owner]
    table = table_for(s, "send", redis_client)
    group = s.topology.send_group
    try:
        park_h_and_c_behind_a(s, units, table)
        hooked: list[str] = []
        real_produce = room_owner.session.produce

        def produce(records: list[Any], track: Any = None, barriers: Any = ()) -> None:
            vals = [r.value for r in records]
            if b"C1" not in vals or hooked:
                return real_produce(records, track, barriers)
            k = vals.index(b"C1")
            real_produce(records[:k], track, ())
            room_owner.session.producer.flush(10)
            hooked.append(table.entries()["H"].state)
            poison = [*headers_for("H", on_poison="stop-group"), (contract.SEQ, b"x")]
            send(boot, q, [(0, b"H-reused", poison)])
            step_until(
                lane_owner,
                lambda: committed(s.kafka, group, q, 0) == 7 and lane_owner._inflight is None,
                60,
                "the lane owner routes the poison and commits",
            )
            real_produce(records[k:], track, ())

        room_owner.session.produce = produce  # type: ignore[method-assign]
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        step_all(
            units,
            lambda: (
                bool(hooked)
                and not table.loads()
                and not table.room()
                and not room_owner.steps.room.index.gids()
            ),  # type: ignore[union-attr]
            90,
            "C drained, H dead-lettered",
        )
    finally:
        for u in units:
            stop(u)
    assert hooked == [room.WAITING]
    assert values(transfer(s)) == [b"A0", b"A1", b"C0", b"C1"]
    dead = read_records(boot, s.topology.dead_letter_topic)
    assert [dict(h).get("reason") for _, h in dead] == [
        b"bad-seq",
        b"group-stopped",
        b"group-stopped",
    ]


def test_a_head_drained_in_part_is_written_first_when_its_dead_chain_is_drained_again(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """H streams (admitted before K: the room admits by wait start, then by ID): its first
    record is drained alone (its final not sent yet), then its final
    parks, and U1's drain forwards H's rest with K and the lane's ordinary message chained
    behind it and dies in that batch's commit. U2 rebuilds the room's index from the low
    mark, where H's drain marker (read before H's rest) lists H after K and the lane: H's
    rest must still go first. Until issue 29's fix U2 wrote K0, K1 and o inside H's span
    (a streamed chaos run under `wait`: tests/unit/unit/steps/drain/test_chain_replay_order.py)."""
    s = settings(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    table = table_for(s, "send", redis_client)
    u1 = room_unit(s)
    send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
    step_until(u1, lambda: committed(s.kafka, s.topology.send_group, q, 0) == 1, 60, "A0")
    send(boot, q, [
        (0, b"H0", headers_for("H", seq=0)),
        (0, b"K0", headers_for("K", seq=0)),
        (0, b"K1", headers_for("K", seq=1, final=True)),
        (0, b"o", headers_for(None)),
    ])  # fmt: skip

    def settled(n: int) -> Callable[[], bool]:
        def done() -> bool:
            gids = list(table.room()) or ["H"]
            return committed(s.kafka, s.topology.send_group, q, 0) == n and not any(
                st.leased for st in table.room_state(gids).values()
            )

        return done

    step_until(u1, settled(5), 60, "H, K and o parked")
    drain = u1.steps.room
    assert drain is not None
    # H stays admitted after its first drain: the drain cannot learn the room's end offset,
    # so it never checks H for the switch to open (its final then parks behind H0)
    setattr(drain, "_end", lambda tp: None)  # noqa: B010 (a private method, replaced)
    send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
    step_until(u1, lambda: b"H0" in values(transfer(s)), 60, "H0 drained alone")
    assert table.entries()["H"].state == room.ADMITTED
    outs = die_in_the_chain_commit(u1)
    send(boot, q, [(0, b"H1", headers_for("H", seq=1, final=True))])
    with contextlib.suppress(Killed):  # H whole: its rest, then K and o chained behind it
        step_until(u1, lambda: False, 60, "the chain batch")
    assert table.entries()["H"].parks == 2
    assert [o.chained for o in outs if o.chained] == [2]
    u1.source.consumer.close()  # dead: its transaction stays open until its timeout
    assert table.entries()["K"].state == room.ADMITTED  # chained, not committed
    u2 = room_unit(s)
    try:
        finish(s, u2, redis_client)
        wait_until(lambda: len(transfer(s)) == 7, 60, "U1's transaction aborted by its timeout")
    finally:
        stop(u2)
    got = values(transfer(s))
    print("HEAD IN PART", got)
    assert got[:4] == [b"A0", b"A1", b"H0", b"H1"], got
    assert sorted(v or b"" for v in got[4:]) == [b"K0", b"K1", b"o"], got


class NoWatermarks:
    """The unit's consumer, but for its watermark requests: the broker answers those on
    the consumer's connection only after its fetch long-poll in flight (up to
    `fetch.wait.max.ms` each), so a drain must never ask them of it."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.asked: list[Any] = []

    def get_watermark_offsets(self, tp: Any, *a: Any, **k: Any) -> tuple[int, int]:
        self.asked.append(tp)
        raise AssertionError(f"watermarks of {tp} asked through the unit's consumer")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_the_drain_reads_its_room_starts_and_ends_on_a_connection_of_its_own(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    """A unit new to its room partitions (nothing committed on them) finds where it reads
    them from and how far they go through the admin client of its drain: through its
    consumer, each partition's answer waited for the fetch long-poll in flight, and a new
    owner's first batches stalled 1 to 3 s (the bench's bursts, 2026-11-30). The chain
    still happens, whole and once."""
    s = settings(topology)
    unit = room_unit(s)
    drain = unit.steps.room
    assert drain is not None
    spy = NoWatermarks(drain.consumer)
    drain.consumer = spy
    try:
        park_h_c_and_o(s, unit, redis_client)
        end_a(s)
        finish(s, unit, redis_client)
    finally:
        stop(unit)
    assert spy.asked == []
    whole_and_once(values(transfer(s)))
