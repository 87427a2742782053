"""Skip markers (`router/unit/steps/emit/markers.py`, docs/explanation/routing.md "Group end" item
7) against the real broker and Redis: a member the send side does not forward while its group goes
on is followed on its transfer partition by a `router-control: skip` record in the same transaction,
which the receive unit routes as that member and forwards nowhere.

* a failed commit and a partial revoke while a batch with markers is in flight: the
  replay writes each marker and each dead letter once (in-process units);
* a send unit and then a receive unit SIGKILLed with markers in their open transaction:
  the group is delivered once, in order, on one queue, each skipped member dead-lettered
  once, each marker on the transfer topic once (unit processes);
* a whole group (`guarantee-delivery: complete`) whose first member is skipped is written
  to its receive queue in one transaction even when the receive unit's batches cut it;
* no marker ever reaches a receive queue.

Judged from what the receive queues, the transfer topic and the dead-letter topic hold
(read_committed, to their end), never from the router's counters.
"""

from __future__ import annotations

import os
from typing import Any

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from router import contract
from router.config import RouterSettings
from router.contract import events, headers_for, lifetime, schemas
from tests.fixtures.factories import PipelineFactory, TopologyFactory
from tests.fixtures.helpers import wait_until
from tests.fixtures.inprocess import (
    committed,
    limit_record_size,
    send,
    started_unit,
    step_until,
    stop,
)

BAD = [(lifetime.LIFETIME_MS, b"soon")]  # bad-lifetime: dead-lettered, its group goes on
Headers = list[tuple[str, bytes]]


def member(gid: str, seq: int, *, final: bool = False, extra: Headers | None = None) -> Headers:
    return [*headers_for(gid, seq=seq, final=final), *(extra or [])]


def everything(s: RouterSettings, transfer_partitions: int) -> dict[str, list[Any]]:
    """Every committed record of the receive queues, transfer topic and dead letters."""
    t = s.topology
    parts = {q: TopicPartition(q, 0) for q in t.receive_queues}
    for p in range(transfer_partitions):
        parts[f"transfer[{p}]"] = TopicPartition(t.transfer_topic, p)
    parts["dlq"] = TopicPartition(t.dead_letter_topic, 0)
    return read_to_end(s.kafka, parts, timeout=60)


def skip_markers(read: dict[str, list[Any]], gid: str) -> list[bytes | None]:
    """The seq of each skip marker of `gid` on the transfer topic, in order."""
    out = []
    for name, ms in read.items():
        if not name.startswith("transfer["):
            continue
        for m in ms:
            h = dict(m.headers() or [])
            if (
                h.get(contract.CONTROL) == contract.SKIP
                and h.get(contract.GUARANTEE_ID) == gid.encode()
            ):
                out.append(h.get(contract.SEQ))
    return out


def dead_letters(read: dict[str, list[Any]]) -> list[tuple[bytes | None, str]]:
    out = []
    for m in read["dlq"]:
        d = schemas.decode(events.DEAD_LETTER, m.value())
        out.append((d["value"], d["reason_code"]))
    return out


def queues_hold(s: RouterSettings, read: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The receive queues' records, after checking that no marker reached any of them."""
    held = {q: read[q] for q in s.topology.receive_queues}
    for q, ms in held.items():
        for m in ms:
            assert m.value() is not None, f"a record without value on {q}: {m.headers()}"
            assert not any(k == contract.CONTROL for k, _ in m.headers() or []), (q, m.headers())
    return held


def group_on_one_queue(held: dict[str, list[Any]], prefix: bytes) -> list[Any]:
    """The records of one group (values starting with `prefix`): all on one queue."""
    on = {q: [m for m in ms if m.value().startswith(prefix)] for q, ms in held.items()}
    on = {q: ms for q, ms in on.items() if ms}
    assert len(on) == 1, f"group {prefix!r} on {sorted(on)}"
    return next(iter(on.values()))


def test_a_failed_commit_and_a_revoke_replay_each_skip_marker_and_dead_letter_once(
    topology: TopologyFactory, admin: AdminClient
) -> None:
    """Batch N holds g0 (bad: dead-lettered, a skip marker), g1 and g2, which the transfer
    topic refuses (too large for it): N's commit fails. The next poll returns g3 (the
    final) and a partial revoke inside it completes N, which fails and rewinds partition
    0 (test_unit_sequences' first sequence, with markers in the batch). The replay
    dead-letters g0 again and g2 as rejected-by-broker, each followed by a marker: the
    transfer topic holds one marker per skipped member, in its place, and the receive
    unit delivers g1, g3 on one queue."""
    s = topology(
        topology={"send_queue_count": 1, "send_queue_partitions": 2, "receive_units": 1},
        unit={"batch_size": 10, "overlap_min_batch": 0},  # the overlap at any size
    )
    queue, transfer = s.topology.send_queues[0], s.topology.transfer_topic
    limit_record_size(admin, transfer, 20_000)  # smaller than the router's own limit
    bootstrap = s.kafka.bootstrap_servers
    big = os.urandom(100_000)
    unit = started_unit(s, "send", partitions=2)
    try:
        send(bootstrap, queue, [
            (0, b"g0", member("g", 0, extra=BAD)),
            (0, b"g1", member("g", 1)),
            (0, big, member("g", 2)),
        ])  # fmt: skip
        step_until(unit, lambda: unit._inflight is not None, 30, "batch N in flight")
        assert len(unit._inflight[0].items) == 3  # type: ignore[index]
        send(bootstrap, queue, [(0, b"g3", member("g", 3, final=True))])
        real_poll = unit.source.poll

        def poll_with_a_revoke(timeout: float) -> list[object]:
            got: list[object] = []
            for _ in range(50):
                got += real_poll(0.1)
                if got:
                    break
            unit._on_revoke(unit.source.consumer, [TopicPartition(queue, 1)])
            return got

        unit.source.poll = poll_with_a_revoke  # type: ignore[method-assign,assignment]
        unit.step()
        unit.source.poll = real_poll  # type: ignore[method-assign]
        assert unit._inflight is None, "the batch polled with the failure was produced"
        step_until(
            unit,
            lambda: committed(s.kafka, s.topology.send_group, queue, 0) == 4,
            60,
            "the replay to commit partition 0 to its end",
        )
    finally:
        stop(unit)
    receive = started_unit(s, "receive", partitions=1)
    try:
        # (a wait only: the verdict is read from the topics below)
        step_until(
            receive,
            lambda: receive.metrics.get("messages_out") >= 2,
            60,
            "the receive unit to forward g1 and g3",
        )
    finally:
        stop(receive)
    read = everything(s, 1)
    assert [m.value() for m in read["transfer[0]"] if m.value() is not None] == [b"g1", b"g3"]
    assert skip_markers(read, "g") == [b"0", b"2"]
    order = [m.value() or dict(m.headers())[contract.SEQ] for m in read["transfer[0]"]]
    assert order == [b"0", b"g1", b"2", b"g3"]  # each marker in its member's place
    assert sorted(reason for _, reason in dead_letters(read)) == [
        "bad-lifetime",
        "rejected-by-broker",
    ]
    held = queues_hold(s, read)
    assert [m.value() for m in group_on_one_queue(held, b"g")] == [b"g1", b"g3"]


def produce(p: Pipeline, records: list[tuple[bytes, Headers]]) -> None:
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers, "acks": "all"})
    for value, headers in records:
        producer.produce(p.settings.topology.send_queues[0], value, partition=0, headers=headers)
    assert producer.flush(30) == 0


def dies_then_replaced(p: Pipeline, role: str, what: str) -> None:
    """The `role` process armed to SIGKILL itself after producing (its transaction open,
    markers in it) dies; a clean one takes its place."""
    (armed,) = [x for x in p.fleet.procs if x.role == role and x.alive]
    wait_until(lambda: not armed.alive, 90, what, report=lambda: armed.tail(15))
    assert armed.popen.returncode == -9, armed.tail(15)
    p.fleet.start(role, 1)


def test_units_killed_with_skip_markers_in_their_open_transaction(
    pipeline: PipelineFactory,
) -> None:
    """The send unit SIGKILLs itself with its first batch on the broker inside an open
    transaction (the dead letters, the skip markers, the forwarded members, the offsets);
    a new one replays the batch. Then the receive unit does the same with the batch that
    routes the markers (the first of them opens the group there); a new one replays it.
    Each skipped member is dead-lettered once, each marker is on the transfer topic once,
    the rest of the group reaches one receive queue once, in order."""
    spec = PipelineSpec(
        send_units=0,
        receive_units=0,
        sweepers=0,
        send_queues=1,
        send_queue_partitions=1,
        transfer_partitions=2,
        receive_queues=2,
        extra_env={"ROUTER_KAFKA__TRANSACTION_TIMEOUT_MS": "5000"},
    )
    p = pipeline(spec, start=False)
    p.prepare()
    armed = {"ROUTER_FAULTS": "after_produce=1.0"}
    p.fleet.start("send-unit", 1, env=armed)
    p.fleet.start("receive-unit", 1, env=armed)
    # one group only, so one transfer partition: each unit's first batch starts at marker 0
    produce(
        p,
        [
            (b"g0", member("g", 0, extra=BAD)),
            (b"g1", member("g", 1)),
            (b"g2", member("g", 2, extra=BAD)),
            (b"g3", member("g", 3)),
            (b"g4", member("g", 4, final=True)),
        ],
    )
    dies_then_replaced(p, "send-unit", "the armed send unit to die after producing")
    dies_then_replaced(p, "receive-unit", "the armed receive unit to die after producing")
    wait_until(
        lambda: p.unit_metrics().get("receive-unit", {}).get("messages_out", 0) >= 3,
        90,
        "the replacement receive unit to deliver g1, g3 and g4",
    )
    p.stop()
    read = everything(p.settings, spec.transfer_partitions)
    held = queues_hold(p.settings, read)
    assert [m.value() for ms in held.values() for m in ms] == [b"g1", b"g3", b"g4"]
    assert skip_markers(read, "g") == [b"0", b"2"]
    assert sorted(dead_letters(read)) == [(b"g0", "bad-lifetime"), (b"g2", "bad-lifetime")]


def test_a_whole_group_whose_first_member_is_skipped_is_one_write_downstream(
    pipeline: PipelineFactory,
) -> None:
    """Policy wait, whole-group delivery asked by header only, member 0 dead-lettered; the
    receive unit reads at most two records a batch, so its batches cut the group. The
    group still reaches its receive queue in one transaction: consecutive offsets (two
    transactions on a partition are always apart by a commit marker's offset)."""
    spec = PipelineSpec(
        send_units=1,
        receive_units=1,
        sweepers=0,
        send_queues=1,
        send_queue_partitions=1,
        transfer_partitions=2,
        receive_queues=2,
        busy_policy="wait",
        role_env={"receive-unit": {"ROUTER_UNIT__BATCH_SIZE": "2"}},
    )
    p = pipeline(spec)
    whole = [(contract.DELIVERY, b"complete")]
    produce(p, [
        (b"w0", member("w", 0, extra=[*whole, *BAD])),
        (b"w1", member("w", 1, extra=whole)),
        (b"w2", member("w", 2, extra=whole)),
        (b"w3", member("w", 3, extra=whole)),
        (b"w4", member("w", 4, final=True, extra=whole)),
    ])  # fmt: skip
    wait_until(
        lambda: p.unit_metrics().get("receive-unit", {}).get("messages_out", 0) >= 4,
        90,
        "the receive unit to deliver w1..w4",
    )
    p.stop()
    read = everything(p.settings, spec.transfer_partitions)
    held = queues_hold(p.settings, read)
    got = group_on_one_queue(held, b"w")
    assert [m.value() for m in got] == [b"w1", b"w2", b"w3", b"w4"]
    offsets = [m.offset() for m in got]
    assert offsets == list(range(offsets[0], offsets[0] + 4)), f"written apart: {offsets}"
    assert skip_markers(read, "w") == [b"0"]
    assert dead_letters(read) == [(b"w0", "bad-lifetime")]
