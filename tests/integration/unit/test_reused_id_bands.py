"""Adversarial review of priority bands against real Redis and real unit processes: a
guarantee ID reused for a new group in the batch of its old group's final (the unit test
is tests/unit/receiver/test_priority_bands.py). Judged from what the receive queue's band topics
and the dead-letter topic hold (read_committed), never from the router's counters."""

from __future__ import annotations

import redis
from confluent_kafka import Producer

from ops.harness.stack.pipeline import PipelineSpec
from router import contract
from router.config import RouterSettings
from router.contract import priority
from router.table.store.codec import TableKeys
from router.topology.side import side_spec
from router.unit.steps.bands import BandStep, GroupBands
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.emit.emitter import Emitter
from tests.fixtures.band_topics import BANDS, count_delivered, received
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.helpers import wait_until

P = priority.PRIORITY
Headers = list[tuple[str, bytes]]


def member(gid: str, seq: int, *, final: bool = False, prio: bytes | None = None) -> Headers:
    own = [(k, v) for k, v in contract.headers_for(gid, final=final, seq=seq) if v is not None]
    return own + ([(P, prio)] if prio is not None else [])


def test_the_real_script_keeps_a_reused_id_in_one_band(
    redis_client: redis.Redis, redis_prefix: str
) -> None:
    """The unit test's scenario on the real script (router/table/store/lua/bands.lua): the old group
    ends and the ID is reused in one batch; the new group's next member, one batch later,
    is in the band its first member took."""
    s = RouterSettings(
        topology={"name": "topo", "send_queue_count": 1, "receive_queue_count": 2},
        priority={"bands": BANDS},
    )
    t = s.topology
    q = t.send_queues[0]
    table = GroupBands(redis_client, TableKeys.of(redis_prefix, "topo", "send"), 60_000)
    step = BandStep(BANDS, t.send_queues, [t.transfer_topic], table)

    def batch(*messages: FakeMessage) -> Batch:
        b = Batch("u:1", 0)
        Classifier(s, "send", {}).classify(b, list(messages))  # type: ignore[arg-type]
        step.assign(b)
        return b

    first = batch(
        msg(0, "g", seq=0, topic=q, extra=[(P, b"9")]),
        msg(1, "g", seq=1, final=True, topic=q, extra=[(P, b"9")]),
        msg(2, "g", seq=0, topic=q, extra=[(P, b"0")]),
    )
    for item in first.items:
        item.decision = "0"
    step.settle(first, Emitter(s, side_spec(s, "send"), "u").emit(first, 0))
    later = batch(msg(3, "g", seq=1, topic=q, extra=[(P, b"0")]))
    bands = [priority.stamped_band(i.headers) for i in [*first.items, *later.items]]
    assert bands[:2] == [2, 2]
    assert bands[2] == bands[3], f"the new group split over bands {bands[2]} and {bands[3]}"


SPEC = PipelineSpec(
    send_units=1,
    receive_units=1,
    sweepers=0,
    send_queues=1,
    send_queue_partitions=1,
    transfer_partitions=1,
    receive_queues=1,
    extra_env={"ROUTER_PRIORITY__BANDS": str(BANDS)},
)


def test_an_id_reused_right_after_its_final_arrives_whole_in_one_band(
    pipeline: PipelineFactory,
) -> None:
    """A plain producer: group `g` (priority 9) ends and `g` is reused at once on the same
    send-queue partition by a new group (priority 0); the three records wait on the send
    queue before the units start, so one batch holds them. The new group's later members
    are produced once its first one arrived (a later batch). Every record must arrive once,
    each group whole and in order on one band topic, nothing dead-lettered."""
    p = pipeline(SPEC, start=False)
    p.prepare()
    q = p.settings.topology.send_queues[0]
    rq = p.settings.topology.receive_queues[0]
    producer = Producer(
        {"bootstrap.servers": p.settings.kafka.bootstrap_servers, "enable.idempotence": True}
    )
    first = [
        ("old-0", member("g", 0, prio=b"9")),
        ("old-1", member("g", 1, final=True, prio=b"9")),
        ("new-0", member("g", 0, prio=b"0")),
    ]
    rest = [("new-1", member("g", 1, prio=b"0")), ("new-2", member("g", 2, final=True))]
    for value, headers in first:
        producer.produce(q, value.encode(), partition=0, headers=headers)
    assert producer.flush(30) == 0
    p.start()
    count_delivered(p, priority.band_topics(rq, BANDS), len(first), timeout=90)
    for value, headers in rest:
        producer.produce(q, value.encode(), partition=0, headers=headers)
    assert producer.flush(30) == 0

    def settled() -> bool:
        got = received(p)
        n = sum(len(v) for k, v in got.items() if k != "dlq")
        return n + len(got["dlq"]) >= len(first) + len(rest)

    wait_until(settled, 90, "every record delivered or dead-lettered", 1.0)
    p.stop()
    got = received(p)
    letters = [dict(m.headers() or []).get("reason") for m in got["dlq"]]
    assert letters == [], f"dead-lettered: {letters}"
    where: dict[str, tuple[int, int]] = {}
    for band, topic in enumerate(priority.band_topics(rq, BANDS)):
        for m in got[topic]:
            value = (m.value() or b"").decode()
            assert value not in where, f"{value} twice"
            where[value] = (band, m.offset())
    assert set(where) == {v for v, _ in first + rest}
    for prefix, n in (("old", 2), ("new", 3)):
        places = [where[f"{prefix}-{i}"] for i in range(n)]
        assert len({b for b, _ in places}) == 1, f"group {prefix} split over bands: {places}"
        # in order, nothing of the other group between (transaction markers take offsets)
        offsets = [o for _, o in places]
        assert offsets == sorted(offsets), f"{prefix} out of order: {places}"
        inside = [
            v for v, (b, o) in where.items() if b == places[0][0] and offsets[0] < o < offsets[-1]
        ]
        assert all(v.startswith(prefix) for v in inside), f"{prefix} interleaved: {inside}"
