"""Where the stranded-partitions guard (router.unit.stalls, `Recovery._unstrand`) must not
assign a partition again, against the real broker: a partition whose committed offset lies
before records deleted since (nothing waits), and partitions whose records wait in a deep
local queue behind the others' while the unit works through a backlog (their fetchers run:
assigning them again threw away what they fetched and queued them last again, so one of
them was never read while the backlog lasted). And where it may: while a revocation waits
in the unit's queue (each partition still ends with one owner)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from router.metrics.registry import Metrics
from router.unit.recovery import Recovery
from router.unit.source import Source
from router.unit.steps.holds import Backoff, Holds
from tests.fixtures.factories import TopicFactory, TopologyFactory
from tests.fixtures.helpers import wait_until
from tests.fixtures.inprocess import committed, read_to_end, send, started_unit, step_until, stop


def _source(bootstrap: str, group: str, batch: int, **extra: object) -> Source:
    config = {  # as a unit's (router.backends.kafka.clients.consumer_config)
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        **extra,
    }
    return Source(config, batch_size=batch, metrics=Metrics(), max_batch_size=batch)


def test_a_committed_offset_before_deleted_records_is_no_record_waiting(
    kafka_bootstrap: str, admin: AdminClient, new_topic: TopicFactory, group_id: str
) -> None:
    topic = new_topic("strand-deleted", partitions=2)
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    for p in (0, 1):
        for i in range(5):
            plain.produce(topic, f"{i}".encode(), partition=p)
    assert plain.flush(30) == 0
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id})
    committer.commit(
        offsets=[TopicPartition(topic, p, 2) for p in (0, 1)], asynchronous=False
    )  # read up to 2, then records 0-4 deleted (delete-records; retention does the same)
    committer.close()
    done = admin.delete_records([TopicPartition(topic, p, 5) for p in (0, 1)])
    for future in done.values():
        future.result(timeout=30)
    source = _source(kafka_bootstrap, group_id, 100)
    source.stalls.after_s = 1.0  # asked about again 1 s after an answer, retry_s after none
    source.subscribe(
        [topic],
        on_assign=lambda _c, ps: source.assign(ps, paused=False),
        on_revoke=lambda _c, ps: source.revoke(ps),
    )
    guard = source.stalls
    at = [time.monotonic() + 60.0]  # long past the guard's delay

    def verdict() -> list[tuple[str, int]]:
        """The guard's verdict once it had the broker's answer for both partitions (on a
        loaded machine a request may time out: the guard then asks again later)."""
        for _ in range(6):
            at[0] += 2 * guard.retry_s
            out = source.stranded(at[0], skip=set())
            if all(guard.due[(topic, p)] == at[0] + guard.after_s for p in (0, 1)) or out:
                return out
        raise AssertionError("the broker never answered the guard")

    try:
        wait_until(lambda: source.poll(0.2) == [] and len(source.assigned) == 2, 30, "assigned")
        # librdkafka reads from the low watermark (out of range: auto.offset.reset) and finds
        # nothing; the position stays unknown, the committed offset stays 2, the stable one 5
        verdicts = [verdict() for _ in range(3)]
        assert guard.unconsumed == {(topic, 0), (topic, 1)}
        # partition 1 gets a record it never reads: its fetcher paused behind the guard's back
        source.consumer.pause([TopicPartition(topic, 1)])
        plain.produce(topic, b"5", partition=1)
        assert plain.flush(30) == 0
        stranded = verdict()
    finally:
        source.close()
    assert verdicts == [[], [], []], "deleted records taken for records waiting"
    assert stranded == [(topic, 1)]  # records past the low watermark do wait


def test_partitions_queued_behind_a_backlog_are_not_assigned_again(
    kafka_bootstrap: str, new_topic: TopicFactory, group_id: str
) -> None:
    """Four partitions, 2,000 records of 1 kB each; the local queue holds 4 MB (as a
    unit's holds twice `unit.max_batch_bytes`), the loop takes ten records per turn and
    commits them (as a unit's transaction does), so the queue is seconds deep and the
    guard's delay a fraction of that. The loop's own `_unstrand` runs every turn."""
    partitions, per, batch = 4, 2000, 10
    topic = new_topic("strand-deep", partitions=partitions)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    value = b"x" * 1000
    for p in range(partitions):
        for _ in range(per):
            producer.produce(topic, value, partition=p)
        producer.poll(0)
    assert producer.flush(60) == 0
    source = _source(kafka_bootstrap, group_id, batch, **{"queued.max.messages.kbytes": 4096})
    source.stalls.after_s = 0.3
    loop = SimpleNamespace(  # what `Recovery._unstrand` reads of a unit
        source=source,
        backoff=Backoff(200, 5000),
        holds=Holds(0.1, 10.0),
        bands=None,
        _inflight=None,
        steps=SimpleNamespace(room=None),
        metrics=Metrics(),
    )
    source.subscribe(
        [topic],
        on_assign=lambda _c, ps: source.assign(ps, paused=False),
        on_revoke=lambda _c, ps: source.revoke(ps),
    )
    read: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def turn() -> bool:
        last: dict[int, int] = {}
        for m in source.poll(0.1):
            read[m.partition()].append(m.offset())
            last[m.partition()] = m.offset() + 1
        if last:
            source.consumer.commit(
                offsets=[TopicPartition(topic, p, o) for p, o in last.items()],
                asynchronous=False,
            )
        Recovery._unstrand(loop)  # type: ignore[arg-type]
        done = sum(map(len, read.values())) >= partitions * per
        return done or loop.metrics.get("stranded_reassigned") > 0

    try:
        wait_until(turn, 120, "every record read", interval=0)
    finally:
        source.close()
    assert loop.metrics.get("stranded_reassigned") == 0, (
        f"partitions assigned again while their records were queued: read {read_counts(read)}"
    )
    for p in range(partitions):
        assert read[p] == list(range(per)), f"partition {p}: {read_counts(read)}"


def read_counts(read: dict[int, list[int]]) -> dict[int, int]:
    return {p: len(offsets) for p, offsets in read.items()}


def test_a_unit_works_through_a_backlog_without_assigning_partitions_again(
    topology: TopologyFactory, admin: AdminClient
) -> None:
    """The same through a send unit's own loop (in-process): 10,000 records of 1 kB on
    four partitions wait before it starts; its queue holds 16 MB, the guard's delay is
    0.3 s. Before the fix it assigned partitions again about twenty times on the way (and
    took twice as long); now none, and the transfer topic holds every record once."""
    s = topology(topology={"send_queue_count": 1, "send_queue_partitions": 4, "receive_units": 1})
    queue, transfer = s.topology.send_queues[0], s.topology.transfer_topic
    bootstrap, per = s.kafka.bootstrap_servers, 2500
    sent = [f"{p}-{i}".ljust(1000).encode() for i in range(per) for p in range(4)]
    send(bootstrap, queue, [(int(v[:1]), v, None) for v in sent])
    unit = started_unit(s, "send", partitions=4)
    unit.source.stalls.after_s = 0.3

    def caught_up() -> bool:
        return all(committed(s.kafka, s.topology.send_group, queue, p) == per for p in range(4))

    try:
        step_until(unit, caught_up, 120, "the backlog committed")
    finally:
        stop(unit)
    assert unit.metrics.get("stranded_reassigned") == 0
    partitions = len(admin.list_topics(transfer, timeout=10).topics[transfer].partitions)
    got = read_to_end(bootstrap, transfer, partitions)
    assert len(got) == len(sent) and set(got) == set(sent)


def test_assigning_again_while_a_revoke_is_pending_leaves_one_owner_a_partition(
    kafka_bootstrap: str, new_topic: TopicFactory, group_id: str
) -> None:
    """The guard's re-assignment racing a rebalance (KIP-848): a second member joins, the
    coordinator takes two of the first member's four partitions away, and before the
    first member polls (the revocation waits in its queue) it assigns all four again, as
    the guard does. The revocation still goes through: each partition ends with exactly
    one owner, and every record produced afterwards is read once, by its owner."""
    topic = new_topic("strand-race", partitions=4)
    sources = [_source(kafka_bootstrap, group_id, 100) for _ in range(2)]
    read: list[dict[tuple[int, int], int]] = [{}, {}]

    revoked_at: list[float] = []

    def join(i: int) -> None:
        s = sources[i]

        def on_revoke(_c: Consumer, ps: list[TopicPartition]) -> None:
            if i == 0 and ps:
                revoked_at.append(time.monotonic())
            s.revoke(ps)

        s.subscribe(
            [topic], on_assign=lambda _c, ps: s.assign(ps, paused=False), on_revoke=on_revoke
        )

    def poll(i: int) -> None:
        for m in sources[i].poll(0.1):
            read[i][(m.partition(), m.offset())] = read[i].get((m.partition(), m.offset()), 0) + 1

    first = sources[0]

    def four() -> bool:
        poll(0)
        return len(first.assigned) == 4

    try:
        join(0)
        wait_until(four, 30, "the first member's four partitions")
        join(1)

        def revoking() -> bool:  # the first member does not poll: its revocation waits
            poll(1)  # (the coordinator tells it within a heartbeat interval, 5 s)
            return time.monotonic() > joined + 8.0

        joined = time.monotonic()
        wait_until(revoking, 30, "the second member's heartbeats")
        reassigned_at = time.monotonic()
        first.reassign(sorted(first.assigned), paused=False, now=reassigned_at)

        def settled() -> bool:
            poll(0)
            poll(1)
            owned = [{tp.partition for tp in s.consumer.assignment()} for s in sources]
            return len(owned[0]) == len(owned[1]) == 2 and owned[0] | owned[1] == set(range(4))

        wait_until(settled, 60, "two partitions each", interval=0)
        owners = [{p for _, p in s.assigned} for s in sources]
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for p in range(4):
            for i in range(50):
                producer.produce(topic, f"{i}".encode(), partition=p)
        assert producer.flush(30) == 0

        def all_read() -> bool:
            poll(0)
            poll(1)
            return sum(len(r) for r in read) >= 200

        wait_until(all_read, 60, "every record", interval=0)
    finally:
        for s in sources:
            s.close()
    assert revoked_at and revoked_at[0] > reassigned_at, "the revocation did not wait"
    assert owners[0] | owners[1] == set(range(4)) and not owners[0] & owners[1]
    for i in (0, 1):
        assert {p for p, _ in read[i]} == owners[i], f"member {i} read others' partitions"
        assert set(read[i].values()) == {1}, f"member {i} read records twice"
    assert sorted(k for r in read for k in r) == [(p, o) for p in range(4) for o in range(50)]
