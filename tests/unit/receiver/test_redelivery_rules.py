"""Redelivery at the head and the delivery limit: the pure rules (router.receiver.redelivery_rules),
the receiver's bookkeeping under abandons (OffsetTracker.rewind, Gatherer.rewind) and the in-process
counts. No servers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.config import RouterSettings, RoutingSettings, TopologySettings
from router.receiver import redelivery_rules as rules
from router.receiver.deliverycounts import MemoryCounts, key_of
from router.receiver.received import Gatherer, OffsetTracker, Received
from router.receiver.redelivery_rules import Ledger, RedeliveryOptions

TP = ("shop.recv.0", 0)


def msg(
    offset: int, gid: str | None = None, seq: int | None = None, final: bool = False
) -> Received:
    headers: list[tuple[str, bytes | None]] = []
    if gid is not None:
        headers.append(("guarantee-id", gid.encode()))
    return Received(*TP, offset, None, b"v", headers, None, gid, final, seq)


def test_the_limit_counts_failed_deliveries_and_none_means_unlimited() -> None:
    assert rules.check_max_deliveries(None) == 0
    assert rules.check_max_deliveries(0) == 0
    assert rules.check_max_deliveries(3) == 3
    for bad in (-1, True, 2.5):
        with pytest.raises(ValueError, match="max_deliveries"):
            rules.check_max_deliveries(bad)  # type: ignore[arg-type]
    assert not rules.at_limit(2, 3)
    assert rules.at_limit(3, 3)
    assert not rules.at_limit(10_000, 0)  # no limit


def test_the_dead_letter_topic_comes_from_the_topology_or_its_queue_names() -> None:
    assert rules.topology_of("shop", []) == "shop"
    assert rules.topology_of(None, ["shop.recv.0", "shop.recv.12"]) == "shop"
    assert rules.topology_of(None, ["shop.recv.0", "other.recv.1"]) is None
    assert rules.topology_of(None, ["orders"]) is None


def test_a_groups_policy_is_its_header_then_its_type_then_the_default() -> None:
    options = RedeliveryOptions(poison_policy_by_type={"slip": "stop-group"})
    assert rules.poison_policy([], options) == "dead-letter"
    assert rules.poison_policy([("message-type", b"slip")], options) == "stop-group"
    own = [("message-type", b"slip"), ("guarantee-on-poison", b"dead-letter")]
    assert rules.poison_policy(own, options) == "dead-letter"
    junk = [("guarantee-on-poison", b"explode")]
    assert rules.poison_policy(junk, RedeliveryOptions(poison_policy="stop-group")) == (
        "stop-group"
    )
    with pytest.raises(ValueError, match="poison policy"):
        RedeliveryOptions(poison_policy="explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count_ttl_s"):
        RedeliveryOptions(count_ttl_s=0)


def test_options_follow_the_routers_settings() -> None:
    settings = RouterSettings(
        topology=TopologySettings(name="shop"),
        routing=RoutingSettings(poison_policy="stop-group"),
    )
    options = RedeliveryOptions.of(settings)
    assert options.poison_policy == "stop-group"
    assert options.dead_letter_topic == "shop.dlq"
    assert options.events_topic == "shop.events"


def test_the_ledger_reads_a_partitions_hash_and_judges_each_message() -> None:
    ledger = Ledger(max_deliveries=3)
    ledger.load(
        TP,
        {
            "4": "2",
            "5": "3",  # at the limit: its dead letter was not written before a restart
            "dead:6": "1",
            "stop:g": "7:9",  # group g stopped at 7, members up to 9 dead-lettered
            "stop:bad": "x",  # malformed: ignored
            "junk": "1",
        },
    )
    assert ledger.verdict(TP, 3, None) == rules.DELIVER
    assert ledger.verdict(TP, 4, None) == rules.DELIVER
    assert ledger.failed(TP, 4) == 2
    assert ledger.verdict(TP, 5, None) == rules.LIMIT
    assert ledger.verdict(TP, 6, None) == rules.SKIP
    assert ledger.verdict(TP, 7, "g") == rules.DELIVER  # the stopped member itself is dead
    assert ledger.verdict(TP, 9, "g") == rules.SKIP  # dead-lettered before
    assert ledger.verdict(TP, 10, "g") == rules.STOPPED
    assert ledger.verdict(TP, 10, "h") == rules.DELIVER
    assert ledger.verdict(("other", 0), 5, None) == rules.DELIVER  # not loaded
    ledger.unstop(TP, "g")
    assert ledger.verdict(TP, 10, "g") == rules.DELIVER


def test_counts_and_dead_markers_behind_the_committed_offset_are_pruned() -> None:
    ledger = Ledger(max_deliveries=0)
    ledger.load(TP, {"1": "1", "5": "2", "dead:2": "1", "dead:8": "1", "stop:g": "3:3"})
    assert ledger.stale(TP) == []  # nothing committed yet: nothing is known to be behind
    ledger.committed(TP, 5)
    assert sorted(ledger.stale(TP)) == ["1", "dead:2"]
    assert ledger.stale(TP) == []
    assert ledger.failed(TP, 5) == 2
    assert ledger.stopped(TP, "g") == (3, 3)  # a stopped group stays until its final


def test_memory_counts_keep_what_the_redis_hash_would() -> None:
    counts = MemoryCounts()
    assert counts.add(TP, 4) == 1
    assert counts.add(TP, 4) == 2
    counts.settle(TP, [4], stop=("g", 4, 4))
    counts.settle(TP, [], stop=("g", 4, 6))
    assert counts.load([TP])[TP] == {"4": "2", "dead:4": "1", "stop:g": "4:6"}
    counts.settle(TP, [7], unstop="g")
    assert counts.add(TP, 9, stale=["4", "dead:4"]) == 1
    assert counts.load([TP])[TP] == {"dead:7": "1", "9": "1"}
    key = key_of("router", "billing", TP)
    assert key == "router:{receiver:billing}:deliveries:shop.recv.0:0"


def test_a_rewind_voids_what_was_handed_out_after_the_abandoned_message() -> None:
    t = OffsetTracker()
    first = [msg(o) for o in range(5, 10)]
    for m in first:
        t.received(TP, m.offset, m)
    assert t.done(TP, 5, first[0]) == 6
    assert t.done(TP, 8, first[3]) is None  # done before the abandon: comes again anyway
    t.rewind(TP, 7)  # abandon 7: 7, 8, 9 come again
    assert not t.is_open(TP, 7, first[2])
    assert t.done(TP, 9, first[4]) is None  # void: no effect
    assert t.done(TP, 6, first[1]) == 7  # never past the abandoned message
    again = [msg(o) for o in range(7, 10)]
    for m in again:
        t.received(TP, m.offset, m)
    assert t.done(TP, 7, first[2]) is None  # the earlier delivery of 7 does not count
    assert t.is_open(TP, 7, again[0])
    assert t.done(TP, 7, again[0]) == 8
    assert t.done(TP, 8) == 9  # without a token, as before


@given(st.lists(st.tuples(st.sampled_from(["take", "done", "abandon"]), st.integers(0, 7))))
def test_no_sequence_of_takes_dones_and_abandons_commits_past_an_unfinished_message(
    steps: list[tuple[str, int]],
) -> None:
    """A model partition of 12 messages read in order; `done` and `abandon` act on the
    i-th message handed out and still held. The commit offset never passes a message
    that was not done in its latest delivery, and after an abandon the next message read
    is the abandoned one."""
    t = OffsetTracker()
    position = 0  # the consumer's next offset
    held: list[Received] = []
    finished: set[int] = set()  # offsets whose latest delivery was done
    committed = 0
    for action, i in steps:
        if action == "take" and position < 12:
            m = msg(position)
            t.received(TP, position, m)
            finished.discard(position)
            held.append(m)
            position += 1
        elif held and action == "done":
            m = held.pop(i % len(held))
            moved = t.done(TP, m.offset, m)
            finished.add(m.offset)
            committed = moved if moved is not None else committed
        elif held and action == "abandon":
            m = held[i % len(held)]
            t.rewind(TP, m.offset)
            held = [h for h in held if h.offset < m.offset]
            finished = {o for o in finished if o < m.offset}
            position = m.offset
        assert all(o in finished for o in range(committed)), (committed, finished)
        assert committed <= position


def test_a_gatherer_rewind_keeps_only_members_before_the_abandoned_offset() -> None:
    g = Gatherer()
    assert g.add(msg(0, "a", 0), 0.0) is None
    assert g.add(msg(1, "b", 0), 0.0) is None
    assert g.add(msg(2, "a", 1, final=True), 0.0) is None  # a: ready
    assert g.add(msg(3, "b", 1), 0.0) is None
    g.rewind(TP, 2, 1.0)  # read again from 2: a's final and b's second member come again
    assert g.next_ready(1.0, 60.0) is None
    assert g.add(msg(2, "a", 1, final=True), 1.0) is None
    ready = g.next_ready(1.0, 60.0)
    assert ready is not None and [m.offset for m in ready.messages] == [0, 2]
    assert ready.complete
    assert g.add(msg(3, "b", 1), 1.0) is None
    assert g.add(msg(4, "b", 2, final=True), 1.0) is None
    ready = g.next_ready(1.0, 60.0)
    assert ready is not None and [m.offset for m in ready.messages] == [1, 3, 4]
