"""Priority bands through real unit processes, from a plain confluent-kafka producer using
only the documented headers and topic names (docs/explanation/priority.md):

* a backlog of low-priority messages waits on the send queue before any unit runs; then
  high-priority ones go to the band send queue `<queue>.p2`; the units overtake the
  backlog at every hop: the high ones land on the receive queue's band topic before (all
  but a few batches of) the low ones, judged by the broker's append times;
* a group keeps its first member's band (later members say another priority or none) and
  arrives whole and in order on one band topic of one queue; the `message-priority`
  header alone moves an ordinary message to its band; a malformed one is dead-lettered
  (`bad-priority`);
* nothing is lost or duplicated.

Judged from what the receive queues and the dead-letter topic hold (read_committed, to
their end once the units stopped), never from the router's counters. Also: the group-band
script against real Redis.
"""

from __future__ import annotations

from pathlib import Path

import redis
from confluent_kafka import Producer

from ops.harness.benchmark.priority import run_priority
from ops.harness.stack.pipeline import PipelineSpec
from router import contract
from router.config import RouterSettings
from router.contract import priority
from router.metrics.registry import Metrics
from router.receiver import Receiver
from router.sender import Sender
from router.table.store.codec import TableKeys
from router.unit.steps.bands import GroupBands
from tests.fixtures.band_topics import BANDS, count_delivered, received
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until

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
LOW = 20_000
HIGH = 40
Headers = list[tuple[str, bytes]]


def member(gid: str, seq: int, *, final: bool = False, prio: bytes | None = None) -> Headers:
    own = [(k, v) for k, v in contract.headers_for(gid, final=final, seq=seq) if v is not None]
    return own + ([(priority.PRIORITY, prio)] if prio is not None else [])


def test_high_priority_overtakes_a_backlog_at_every_hop(pipeline: PipelineFactory) -> None:
    p = pipeline(SPEC, start=False)
    p.prepare()  # topics, no unit yet: the backlog builds up first
    q = p.settings.topology.send_queues[0]
    producer = Producer(
        {
            "bootstrap.servers": p.settings.kafka.bootstrap_servers,
            "linger.ms": 20,
            "enable.idempotence": True,
        }
    )
    sent: dict[str, tuple[str, int]] = {}  # value -> (kind, expected band)

    def send(topic: str, value: str, headers: Headers, kind: str, band: int) -> None:
        producer.produce(topic, value.encode(), partition=0, headers=headers)
        sent[value] = (kind, band)

    for i in range(LOW):  # the backlog: ordinary, priority 0 (or none), and a group
        if i == 100:
            for s in range(5):  # a low group: a later member asks for 9, and is ignored
                prio = b"9" if s == 2 else None
                send(q, f"lg-{s}", member("low-g", s, final=s == 4, prio=prio), "low-group", 0)
        send(q, f"low-{i}", [(priority.PRIORITY, b"0")] if i % 2 else [], "low", 0)
    send(q, "bad-prio", [(priority.PRIORITY, b"high")], "bad", -1)
    send(q, "mid-by-header", [(priority.PRIORITY, b"5")], "header", 1)
    assert producer.flush(60) == 0
    for i in range(HIGH):  # the trickle, on the band send queue: it skips the backlog
        if i == HIGH // 2:
            for s in range(4):  # a high group: first member 9, later ones say nothing or 0
                prio = b"9" if s == 0 else (b"0" if s == 3 else None)
                send(f"{q}.p2", f"hg-{s}", member("high-g", s, final=s == 3, prio=prio), "high", 2)
        send(f"{q}.p2", f"high-{i}", [(priority.PRIORITY, b"9")], "high", 2)
    assert producer.flush(60) == 0

    p.start()
    rq = p.settings.topology.receive_queues[0]
    count_delivered(p, priority.band_topics(rq, BANDS), len(sent) - 1, timeout=180)
    p.stop()
    got = received(p)

    where: dict[str, tuple[int, int, int]] = {}  # value -> (band, offset, append time)
    for band, topic in enumerate(priority.band_topics(rq, BANDS)):
        for m in got[topic]:
            value = (m.value() or b"").decode()
            assert value not in where, f"{value} delivered twice"
            where[value] = (band, m.offset(), m.timestamp()[1])
    letters = [dict(m.headers() or []) for m in got["dlq"]]
    assert [h.get("reason") for h in letters] == [b"bad-priority"], letters
    assert set(where) == set(sent) - {"bad-prio"}, "lost or unexpected messages"
    for value, (_, band) in sent.items():
        if band >= 0:
            assert where[value][0] == band, f"{value} in band {where[value][0]}, not {band}"

    for gid, prefix, n in (("low-g", "lg", 5), ("high-g", "hg", 4)):
        offsets = [where[f"{prefix}-{s}"][1] for s in range(n)]
        assert offsets == list(range(offsets[0], offsets[0] + n)), f"{gid} not contiguous"

    lows = sorted(t for v, (b, _, t) in where.items() if sent[v][0] == "low")
    highs = [t for v, (b, _, t) in where.items() if sent[v][0] == "high"]
    # Every high one landed before 90% of the backlog: it overtook the send queue, the
    # transfer topic and the receive queue (without bands it would land after all of it).
    assert max(highs) <= lows[len(lows) // 10], (
        f"the last high-priority message landed after {sum(t < max(highs) for t in lows)} "
        f"of {len(lows)} low-priority ones"
    )


def test_a_group_keeps_the_band_of_its_first_member_in_redis(
    redis_client: redis.Redis, redis_prefix: str
) -> None:
    keys = TableKeys.of(redis_prefix, "topo", "send")
    metrics = Metrics()
    bands = GroupBands(redis_client, keys, keep_ms=60_000, metrics=metrics)
    call, got = bands.resolve([("g", 2), ("g", 0), ("h", 1)], [])
    assert got == [2, 2, 1]
    assert metrics.get("redis_round_trips") == 1  # one script call, counted
    call2, got = bands.resolve([("g", 0)], [])
    assert got == [2] and call2 == call + 1
    # g's final was committed in the call before last: forgotten, unless used since
    _, got = bands.resolve([("h", 0)], [("g", call), ("h", call)])
    assert got == [0]  # h was forgotten first (its last use was `call`): a new group
    _, got = bands.resolve([("g", 0)], [])
    assert got == [2]  # g was used again in call2, after its final's call: kept
    keep = GroupBands(redis_client, keys, keep_ms=0)
    _, got = keep.resolve([], [])
    assert redis_client.hlen(keys.bands) == 0  # unused longer than keep_ms: forgotten
    assert keys.bands in keys.all()  # dropped with the table


def test_sender_and_receiver_put_high_priority_first(pipeline: PipelineFactory) -> None:
    """The `Sender` with `priority=` and the `Receiver`: a backlog of low-priority
    messages, then high-priority ones; the units overtake it, and a receiver started once
    everything arrived hands the high ones out first, each group whole and in order."""
    p = pipeline(SPEC, start=False)
    p.prepare()
    low, high = 5_000, 20
    expected: dict[str, str] = {}
    with Sender.from_settings(p.settings) as sender:
        for i in range(low):
            if i == 50:
                for s in range(5):
                    sender.send(f"lg-{s}".encode(), guarantee_id="low-g", final=s == 4)
                    expected[f"lg-{s}"] = "low"
            sender.send(f"low-{i}".encode())
            expected[f"low-{i}"] = "low"
        for i in range(high):
            if i == high // 2:
                for s in range(4):  # the first member's priority holds for the group
                    prio = 9 if s == 0 else 0
                    sender.send(
                        f"hg-{s}".encode(), guarantee_id="high-g", final=s == 3, priority=prio
                    )
                    expected[f"hg-{s}"] = "high"
            sender.send(f"high-{i}".encode(), priority=9)
            expected[f"high-{i}"] = "high"
    p.start()
    rq = p.settings.topology.receive_queues[0]
    count_delivered(p, priority.band_topics(rq, BANDS), len(expected), timeout=180)
    p.stop()

    handed: list[str] = []
    with Receiver.from_settings(p.settings, group_id=unique("prio-rx")) as receiver:

        def all_handed() -> bool:
            for message in receiver.consume(500, 0.5):
                handed.append((message.value or b"").decode())
                receiver.done(message)
            return len(handed) >= len(expected)

        wait_until(all_handed, 120, "every message handed out", 0, lambda: f"{len(handed)}")
    assert sorted(handed) == sorted(expected), "lost, duplicated or unexpected"
    highs = [i for i, v in enumerate(handed) if expected[v] == "high"]
    lows_before = sum(1 for v in handed[: max(highs)] if expected[v] == "low")
    assert lows_before <= low // 5, f"{lows_before} low-priority messages before the last high"
    for prefix, n in (("lg", 5), ("hg", 4)):
        at = handed.index(f"{prefix}-0")
        assert handed[at : at + n] == [f"{prefix}-{s}" for s in range(n)], (
            f"group {prefix} not handed out whole and in order"
        )


def test_the_priority_bench_stage_short(base_settings: RouterSettings, tmp_path: Path) -> None:
    """`make bench`'s priority stage (ops/harness/benchmark/priority.py), small: the
    high-priority trickle overtakes the backlog (the 3x goal is the full stage's)."""
    lines: list[str] = []
    r = run_priority(
        base_settings, tmp_path, low=20_000, high=30, rate=150.0, rounds=1, say=lines.append
    )
    print("\n".join(lines))
    assert r.high_p99_ms < r.low_p50_ms, "high-priority messages did not overtake the backlog"
    assert r.overtaken > 0.5, f"only {r.overtaken:.0%} of the backlog landed after the trickle"
