"""The waiting room (busy policy `wait`): a group that finds no clean destination waits
off its source partition, and is delivered whole, in order, once a destination frees.

One transfer partition and one receive queue, so a single open group makes everything busy.
"""

from __future__ import annotations

import os
import subprocess
import sys

from confluent_kafka import Producer, TopicPartition

from ops.harness.scenarios.burst import HEADER, burst_spec, run_all_open, run_burst
from ops.harness.scenarios.demo_run import summary
from ops.harness.stack.pipeline import PipelineSpec
from router.backends.kafka.offsets import CommittedOffsets
from router.backends.redis.client import redis_client
from router.contract import headers_for
from router.contract.events import DEAD_LETTER, GROUP_WAIT_TIMED_OUT
from router.receiver import Receiver
from router.topology.side import side_spec, table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import read_records, unique, wait_until
from tests.fixtures.queues import ONE_WAY, Queue, one_way


def test_a_group_waits_without_blocking_its_partition_and_arrives_whole_after(
    pipeline: PipelineFactory,
) -> None:
    p, s, producer, queue = one_way(pipeline, "wait")
    a, b = s.topology.send_queues
    producer.produce(a, b"A0", partition=0, headers=headers_for("A", seq=0))
    producer.flush(10)
    queue.until(b"A0")
    # B and an ordinary message arrive while A holds the only destination: they wait in
    # the room, and the send queue's partition moves on past them (no head-of-line hold).
    producer.produce(b, b"B0", partition=0, headers=headers_for("B", seq=0))
    producer.produce(b, b"o", partition=0, headers=headers_for(None))
    producer.produce(b, b"B1", partition=0, headers=headers_for("B", seq=1, final=True))
    producer.flush(10)
    send = side_spec(s, "send")
    offsets = CommittedOffsets(s.kafka, unique("probe"))
    wait_until(
        lambda: offsets.read(send.group_id, [TopicPartition(b, 0)], timeout=10).get((b, 0), 0) >= 3,
        60,
        "the send queue's partition consumed past the waiting group",
    )
    send_table = table_for(s, "send", redis_client(s.redis))
    assert set(send_table.room()) == {"B", "~" + f"{b}/0"}
    # What an operator sees: both waiting, with their age and parked messages.
    shown = subprocess.run(
        [sys.executable, "-m", "router", "table", "list", "--side", "send"],
        env={**os.environ, **p.env, "ROUTER_CONFIG": str(p.fleet.config_file)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "waiting room: 2 waiting, 0 admitted" in shown, shown
    rows = {line.split()[0]: line.split() for line in shown.splitlines() if line.strip()}
    assert rows["B"][2] == "2" and float(rows["B"][1]) >= 0, shown  # B0 and its final parked
    assert f"(ordinary of {b}/0)" in shown, shown
    assert any(line.startswith("B ") and line.endswith("waiting") for line in shown.splitlines())
    producer.produce(a, b"A1", partition=0, headers=headers_for("A", seq=1, final=True))
    producer.flush(10)
    # A ends; B was first in the room, then the ordinary message: nothing interleaved.
    assert queue.until(b"A1", b"B0", b"B1", b"o") == [b"A0", b"A1", b"B0", b"B1", b"o"]
    assert send_table.stats().get("shared", 0) == 0
    wait_until(lambda: not send_table.entries(), 60, "every group released")
    queue.receiver.close()
    # Operators' counters (an explanation, not the verdict): B and the lane's ordinary
    # message were admitted out of the room, each counted once in the wait histogram.
    p.stop()
    m = p.unit_metrics()["send-unit"]
    assert m.get("room_admitted") == 2, m
    assert sum(v for k, v in m.items() if k.startswith("room_wait_")) == 2, m


def test_a_waiting_group_with_a_bad_final_is_dead_lettered_in_place_and_still_ends(
    pipeline: PipelineFactory,
) -> None:
    """B waits behind A with B0 and a bad final (a malformed TTL header: its group and
    final flag are readable), C waits behind B. When B drains, its final is dead-lettered
    in its place, with its reason and send-queue position, and still ends B on both sides
    (released on the send side, closed downstream by a close marker): C follows at once.
    Before, the bad final was dead-lettered as it arrived and B never ended (no sweeper
    here): C waited for ever."""
    _, s, producer, queue = one_way(pipeline, "wait")
    a, b = s.topology.send_queues
    producer.produce(a, b"A0", partition=0, headers=headers_for("A", seq=0))
    producer.flush(10)
    queue.until(b"A0")
    bad_final = [*headers_for("B", seq=1, final=True), ("guarantee-ttl-ms", b"soon")]
    producer.produce(b, b"B0", partition=0, headers=headers_for("B", seq=0))
    producer.produce(b, b"B1", partition=0, headers=bad_final)
    producer.produce(b, b"C0", partition=0, headers=headers_for("C", seq=0))
    producer.produce(b, b"C1", partition=0, headers=headers_for("C", seq=1, final=True))
    producer.flush(10)
    send_table = table_for(s, "send", redis_client(s.redis))
    wait_until(lambda: set(send_table.room()) == {"B", "C"}, 60, "B and C waiting")
    producer.produce(a, b"A1", partition=0, headers=headers_for("A", seq=1, final=True))
    producer.flush(10)
    assert queue.until(b"C1") == [b"A0", b"A1", b"B0", b"C0", b"C1"]
    (dead,) = read_records(s, s.topology.dead_letter_topic, DEAD_LETTER, 1)
    # its own reason, and where it was on the send queue (not the room's position)
    assert (dead["value"], dead["reason_code"]) == (b"B1", "bad-ttl"), dead
    assert (dead["source_topic"], dead["source_partition"], dead["source_offset"]) == (b, 0, 1)
    receive_table = table_for(s, "receive", redis_client(s.redis))
    wait_until(
        lambda: not send_table.entries() and not receive_table.entries(),
        60,
        "every group released on both sides (B by its bad final)",
    )
    assert send_table.stats().get("shared", 0) == 0
    queue.receiver.close()


def test_the_issue_burst_from_plain_producers_arrives_with_no_interleaving(
    pipeline: PipelineFactory,
) -> None:
    """The burst that interleaved half its messages under `share` and livelocked `hold`:
    ~300 groups of up to 12 messages and 30% ordinary ones, from two plain producers (the
    README's headers only) on the default topology, 150 groups open per producer against
    3 destinations per side. Under `wait`, judged from what both sides hold: every
    message arrives once, in order, unsplit, and nothing is appended inside another
    group's open span."""
    p = pipeline(burst_spec("wait"))
    result, stats = run_burst(p, say=lambda _: None)
    r = result.report
    text = "\n".join([*summary(result), HEADER, stats.row()])
    print(text)
    assert r.groups_sent >= 250 and r.ordinary_sent == 900, text
    assert r.sent == 3_000 and r.received == r.sent, text
    assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
    assert r.send is not None and r.receive is not None, "both sides judged"
    assert stats.interleaved == (0, 0), text
    assert all(code == 0 for code in result.exit_codes.values()), result.exit_codes
    assert not result.sender_failures and not result.undecodable, text


def test_groups_all_open_before_any_final_arrive_with_no_interleaving(
    pipeline: PipelineFactory,
) -> None:
    """`make bench`'s all-open burst, short: 300 groups of 2..4 messages from two plain
    producers, every first member sent before any middle one and every final last, under
    the default policy on the default topology. Nearly every group waits on both sides and
    leaves the room in chained drains; judged from what both sides hold."""
    p = pipeline(burst_spec("wait"))
    result, stats = run_all_open(p, 300, say=lambda _: None)
    r = result.report
    text = "\n".join([*summary(result), HEADER, stats.row()])
    print(text)
    assert r.groups_sent >= 250 and r.received == r.sent, text
    assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
    assert r.send is not None and r.receive is not None, "both sides judged"
    assert stats.interleaved == (0, 0), text
    assert all(code == 0 for code in result.exit_codes.values()), result.exit_codes
    assert not result.sender_failures and not result.undecodable, text


def test_a_group_that_waits_too_long_is_dead_lettered_with_an_event(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(
        PipelineSpec(
            busy_policy="wait",
            **{**ONE_WAY, "sweepers": 1},  # type: ignore[arg-type]
            extra_env={
                "ROUTER_ROUTING__MAX_WAIT_MS": "1500",
                "ROUTER_ROUTING__WAIT_TIMEOUT_POLICY": "dead-letter",
                "ROUTER_SWEEPER__INTERVAL_MS": "300",
            },
        )
    )
    s = p.settings
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    queue = Queue(Receiver.from_settings(s, group_id=unique("check"), assign=True))
    a, b = s.topology.send_queues
    producer.produce(a, b"A0", partition=0, headers=headers_for("A", seq=0))  # never ends
    producer.flush(10)
    queue.until(b"A0")
    producer.produce(b, b"B0", partition=0, headers=headers_for("B", seq=0))
    producer.produce(b, b"B1", partition=0, headers=headers_for("B", seq=1))
    producer.flush(10)
    (event,) = read_records(s, s.topology.events_topic, GROUP_WAIT_TIMED_OUT, 1)
    assert (event["guarantee_id"], event["outcome"], event["side"]) == (
        "B",
        "DEAD_LETTERED",
        "SEND",
    )
    producer.produce(b, b"B2", partition=0, headers=headers_for("B", seq=2, final=True))
    producer.flush(10)
    dead = read_records(s, s.topology.dead_letter_topic, DEAD_LETTER, 3)
    assert [d["value"] for d in dead] == [b"B0", b"B1", b"B2"]  # in order, none dropped
    assert {d["reason_code"] for d in dead} == {"group-stopped"}
    assert queue.values == [b"A0"]  # nothing of B entered A's path
    queue.receiver.close()
