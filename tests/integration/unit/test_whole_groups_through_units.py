"""Whole-group delivery (`guarantee-delivery: complete`, or `routing.delivery_by_type` /
`default_delivery`): a group is staged in the waiting room until its final, then written
whole to one destination, so that nothing can appear between its members; judged from
what the receive queues hold."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from ops.harness.scenarios.burst import HEADER, burst_spec, run_burst
from ops.harness.scenarios.demo_run import summary
from ops.harness.stack.pipeline import PipelineSpec
from router.backends.kafka.offsets import CommittedOffsets
from router.backends.redis.client import redis_client
from router.contract import headers_for
from router.contract.events import GROUP_STAGING_ABORTED
from router.receiver import Receiver
from router.sender import Sender
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import read_records, unique, wait_until
from tests.fixtures.queues import ONE_WAY, one_way


def test_a_whole_group_is_staged_without_holding_a_destination_and_arrives_contiguous(
    pipeline: PipelineFactory,
) -> None:
    """One destination per side. W asks for whole-group delivery with its first message;
    while it is staged, an ordinary message and a streamed group S pass through the one
    destination (W holds nothing while incomplete). W's final completes it: W arrives
    after S, all three members in a row; the send units count its 6 payload bytes as
    staged."""
    p, s, producer, queue = one_way(pipeline, "wait")
    a, _ = s.topology.send_queues
    whole = {"delivery": "complete"}
    producer.produce(a, b"W0", partition=0, headers=headers_for("W", seq=0, **whole))
    producer.produce(a, b"o1", partition=0, headers=headers_for(None))
    producer.produce(a, b"S0", partition=0, headers=headers_for("S", seq=0))
    producer.produce(a, b"W1", partition=0, headers=headers_for("W", seq=1, **whole))
    producer.flush(10)
    assert queue.until(b"o1", b"S0") == [b"o1", b"S0"]  # W did not hold the destination
    send_table = table_for(s, "send", redis_client(s.redis))
    entry = send_table.entry("W")
    assert entry is not None and entry.state == "staged" and entry.parks == 2, entry
    producer.produce(a, b"S1", partition=0, headers=headers_for("S", seq=1, final=True))
    producer.produce(a, b"W2", partition=0, headers=headers_for("W", seq=2, final=True, **whole))
    producer.flush(10)
    assert queue.until(b"W2") == [b"o1", b"S0", b"S1", b"W0", b"W1", b"W2"]
    receive_table = table_for(s, "receive", redis_client(s.redis))
    wait_until(
        lambda: not send_table.entries() and not receive_table.entries(),
        60,
        "every group released on both sides",
    )
    assert send_table.stats().get("shared", 0) == 0
    wait_until(
        lambda: p.unit_metrics().get("send-unit", {}).get("room_staged_bytes") == 6,
        30,
        "W's 6 bytes counted as staged",
        report=lambda: str(p.unit_metrics()),
    )
    queue.receiver.close()


def test_a_whole_group_over_the_staging_bound_is_announced_and_streamed_in_order(
    pipeline: PipelineFactory,
) -> None:
    """With routing.max_staged_messages = 2, a whole group of four messages stops being
    staged at its second message, on each side: a GroupStagingAborted event per side, and
    it is delivered as a streamed group, in order and uninterleaved."""
    _, s, producer, queue = one_way(pipeline, "wait", ROUTER_ROUTING__MAX_STAGED_MESSAGES="2")
    a, _ = s.topology.send_queues
    for n in range(4):
        headers = headers_for("W", seq=n, final=n == 3, delivery="complete")
        producer.produce(a, f"W{n}".encode(), partition=0, headers=headers)
    producer.produce(a, b"o", partition=0, headers=headers_for(None))
    producer.flush(10)
    values = queue.until(b"W3", b"o")
    w = [v for v in values if v != b"o"]
    assert w == [b"W0", b"W1", b"W2", b"W3"], values
    assert values.index(b"o") not in range(values.index(b"W0") + 1, values.index(b"W3"))
    found = read_records(s, s.topology.events_topic, GROUP_STAGING_ABORTED, 2)
    assert sorted(e["side"] for e in found) == ["RECEIVE", "SEND"], found
    assert all((e["guarantee_id"], e["max_staged_messages"]) == ("W", 2) for e in found)
    queue.receiver.close()


def test_receive_group_hands_the_application_each_whole_group_and_commits_after_done(
    pipeline: PipelineFactory,
) -> None:
    """Three whole groups sent interleaved by the `Sender` (all open at once, one
    destination per side) and an ordinary message: `Receiver.receive_group` returns each
    group at once, its members in order, and the ordinary message on its own; once each
    is `done`, the consumer group's committed offsets are one past the last message."""
    p = pipeline(PipelineSpec(busy_policy="wait", **ONE_WAY))  # type: ignore[arg-type]
    s = p.settings
    sender = Sender.from_settings(s)
    for i in range(3):
        for g in "XYZ":  # the client library asks for whole-group delivery
            sender.send(f"{g}{i}".encode(), guarantee_id=g, final=i == 2, delivery="complete")
        if i == 0:
            sender.send(b"o")
    sender.close()
    group_id = unique("app")
    receiver = Receiver.from_settings(s, group_id=group_id)
    got: dict[str | None, list[bytes | None]] = {}
    last: dict[tuple[str, int], int] = {}
    while len(got) < 4:
        group = receiver.receive_group(60)
        assert group.complete and group.guarantee_id not in got, group
        got[group.guarantee_id] = group.values
        for m in group.messages:
            last[(m.topic, m.partition)] = max(last.get((m.topic, m.partition), -1), m.offset)
        receiver.done(group)
    assert got == {
        None: [b"o"],
        "X": [b"X0", b"X1", b"X2"],
        "Y": [b"Y0", b"Y1", b"Y2"],
        "Z": [b"Z0", b"Z1", b"Z2"],
    }
    receiver.close()
    # Everything done is committed: one past the last message of each partition.
    parts = [TopicPartition(t, n) for t, n in last]
    committed = CommittedOffsets(s.kafka, unique("probe")).read(group_id, parts, timeout=10)
    assert committed == {tp: offset + 1 for tp, offset in last.items()}


def test_the_burst_with_every_group_whole_arrives_with_each_group_contiguous(
    pipeline: PipelineFactory,
) -> None:
    """The waiting-room issue's burst (~300 groups, 150 open per plain producer against 3
    destinations per side: 100x more open groups than destinations), every group asking
    for whole-group delivery by the configuration's default. Judged from what both sides
    hold: every message once, in order, unsplit, and nothing inside any group's span, so
    each group is contiguous on its receive queue."""
    p = pipeline(burst_spec("wait", ROUTER_ROUTING__DEFAULT_DELIVERY="complete"))
    result, stats = run_burst(p, say=lambda _: None)
    r = result.report
    text = "\n".join([*summary(result), HEADER, stats.row()])
    print(text)
    assert r.groups_sent >= 250 and r.sent == 3_000 and r.received == r.sent, text
    assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
    assert r.send is not None and r.receive is not None, "both sides judged"
    assert stats.interleaved == (0, 0), text
    assert all(code == 0 for code in result.exit_codes.values()), result.exit_codes
