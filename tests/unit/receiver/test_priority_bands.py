"""Adversarial review of priority bands and receiver-hop expiry (commit 0af624c), without
servers: the send side's group bands across an ID reused in one batch, the receiver's band
hold (a slow group, a restart, an abandoned final) and the receiver's lifetime check at
its bounds. A test marked xfail(strict) names a defect left open; the others hold (some
after a fix made with them). The real Redis script: tests/integration/unit/test_reused_id_bands.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from router import contract
from router.config import RouterSettings
from router.contract import lifetime, priority
from router.receiver import bandrestore
from router.receiver.bands import ReceiverBands
from router.receiver.expiry_rules import ExpiryOptions, judge
from router.receiver.received import Received
from router.topology.side import side_spec
from router.unit.steps.bands import BandStep
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.emit.emitter import Emitter
from router.utils import clock
from tests.fixtures.bands import FakeConsumer, FakeEnds, MemoryBands, received
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.receivers import banded_receiver, rec

P = priority.PRIORITY
Q = "t.send.1"


def settings() -> RouterSettings:
    return RouterSettings(
        topology={"name": "t", "send_queue_count": 1, "receive_queue_count": 2},
        priority={"bands": 3},
    )


def classified(s: RouterSettings, *messages: FakeMessage) -> Batch:
    batch = Batch("u:1", 0)
    Classifier(s, "send", {}).classify(batch, list(messages))  # type: ignore[arg-type]
    return batch


# ---------------------------------------------------------------- send side: group bands


def test_an_id_reused_in_the_batch_of_its_final_keeps_one_band_for_the_new_group() -> None:
    """Fixed (router/unit/steps/bands.py `settle`). A plain producer's group g (priority 9: band 2)
    ends, and on the same lane the ID is reused at once by a new group (priority 0) in the
    same batch: the script resolves both in one call, so the new group's first member takes
    band 2. The settle step then forgot g's band (the stored call was the final's call), and
    the new group's next member, in the next batch, took its own band 0: one group on two
    bands of its transfer partition, which the receive unit reads as two lanes (its second
    member overtakes the first, or is dead-lettered `group-spans-partitions`)."""
    s = settings()
    table = MemoryBands()
    t = s.topology
    step = BandStep(3, t.send_queues, [t.transfer_topic], table)  # type: ignore[arg-type]
    first = classified(
        s,
        msg(0, "g", seq=0, topic=Q, extra=[(P, b"9")]),
        msg(1, "g", seq=1, final=True, topic=Q, extra=[(P, b"9")]),
        msg(2, "g", seq=0, topic=Q, extra=[(P, b"0")]),  # the ID reused: a new group
    )
    step.assign(first)
    for item in first.items:
        item.decision = "0"  # one transfer partition, as the table routes a same-lane reuse
    out = Emitter(s, side_spec(s, "send"), "u").emit(first, 0)
    assert [gid for gid, _ in out.finals] == ["g"]
    step.settle(first, out)
    later = classified(s, msg(3, "g", seq=1, topic=Q, extra=[(P, b"0")]))
    step.assign(later)
    new_group = [first.items[2], later.items[0]]
    assert len({priority.stamped_band(i.headers) for i in new_group}) == 1
    assert priority.stamped_band(first.items[1].headers) == 2  # the old group kept its own


def test_a_final_forgotten_normally_still_lets_the_next_group_take_its_own_band() -> None:
    """Held (with the fix above): the ID reused in a later batch is a new group in the band
    of its own first member."""
    s = settings()
    table = MemoryBands()
    t = s.topology
    step = BandStep(3, t.send_queues, [t.transfer_topic], table)  # type: ignore[arg-type]
    first = classified(s, msg(0, "g", seq=0, final=True, topic=Q, extra=[(P, b"9")]))
    step.assign(first)
    first.items[0].decision = "0"
    step.settle(first, Emitter(s, side_spec(s, "send"), "u").emit(first, 0))
    again = classified(s, msg(1, "g", seq=0, topic=Q, extra=[(P, b"0")]))
    step.assign(again)
    assert priority.stamped_band(again.items[0].headers) == 0


def test_a_unit_killed_before_forgetting_a_band_leaves_the_next_group_whole() -> None:
    """Held: the unit dies after committing g's final, before its next script call (the
    forget is only in its memory). Its successor (a fresh step, the same Redis) keeps g's
    band for 7 days; a new group under the ID takes that band instead of its own first
    member's (docs/explanation/priority.md says "its first member's"), but all of it, in order."""
    s = settings()
    table = MemoryBands()
    t = s.topology
    dead = BandStep(3, t.send_queues, [t.transfer_topic], table)  # type: ignore[arg-type]
    first = classified(s, msg(0, "g", seq=0, final=True, topic=Q, extra=[(P, b"9")]))
    dead.assign(first)
    first.items[0].decision = "0"
    dead.settle(first, Emitter(s, side_spec(s, "send"), "u").emit(first, 0))  # then killed
    successor = BandStep(3, t.send_queues, [t.transfer_topic], table)  # type: ignore[arg-type]
    got = []
    for offset, extra in ((1, [(P, b"0")]), (2, [(P, b"5")])):
        later = classified(s, msg(offset, "g", seq=offset - 1, topic=Q, extra=extra))
        successor.assign(later)
        got.append(priority.stamped_band(later.items[0].headers))
    assert got == [2, 2]


# ---------------------------------------------------------------- the receiver's band hold


class StaleConsumer(FakeConsumer):
    """As librdkafka: a paused partition is not fetched, so its cached high watermark stays
    where it was when it was paused; asking the broker (no `cached`) gives the real one."""

    def __init__(self, positions: dict[tuple[str, int], tuple[int, int]]) -> None:
        super().__init__(positions)
        self.stale: dict[tuple[str, int], int] = {}
        self.held: set[tuple[str, int]] = set()

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        key = (tp.topic, tp.partition)
        real = self.positions[key][1]
        return 0, self.stale.get(key, real) if cached and key in self.held else real

    def pause(self, tps: list[TopicPartition]) -> None:
        super().pause(tps)
        for tp in tps:
            key = (tp.topic, tp.partition)
            if key not in self.held:
                self.held.add(key)
                self.stale[key] = self.positions[key][1]

    def resume(self, tps: list[TopicPartition]) -> None:
        super().resume(tps)
        self.held.difference_update((tp.topic, tp.partition) for tp in tps)


def test_a_lower_band_paused_while_empty_still_gets_its_share_in_the_receiver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fixed (router/receiver/bands.py `_backlog`). The Receiver measured a paused band's
    backlog from librdkafka's cached watermark, which a paused partition does not update:
    a band paused while empty showed no backlog however much came to it, earned no credit,
    and was not read at all while a higher band kept a backlog (the documented bound: 1
    batch in ceil(1 / min_share) + bands - 2)."""
    consumer = StaleConsumer({("q", 0): (0, 0), ("q.p2", 0): (0, 1_000)})
    monkeypatch.setattr(clock, "SPACING", 0)  # requests spaced by what they took: none
    bands = ReceiverBands(consumer, ["q"], 3, ends=FakeEnds(consumer))
    bands.measure.refresh_s = 0.0  # the broker is asked at most once per refresh_s: every call here
    bands.before_poll()
    assert ("q", 0) in consumer.held  # band 0 empty: paused behind band 2
    consumer.positions[("q", 0)] = (0, 50)  # a backlog comes to band 0 meanwhile
    turns = []
    for i in range(30):  # band 2 keeps a backlog all along
        consumer.positions[("q.p2", 0)] = (i + 1, 1_000)
        bands.before_poll()
        turns.append(("q", 0) not in consumer.held)
    assert any(turns), "band 0 was never read while band 2 had a backlog"
    bound = 11  # bandsched.starvation_bound(3, 0.1)
    gaps = [n for n in range(len(turns) - bound + 1) if not any(turns[n : n + bound])]
    assert not gaps, f"band 0 not read in {bound} consecutive batches from batch {gaps[0]}"


# The group's sender pausing longer than HOLD_IDLE_S (10 s) is ordinary: a group's TTL is
# minutes (routing.ttl_ms), and the router keeps the queue for it all that time.
def test_an_older_lower_band_record_is_not_handed_out_inside_a_slow_group() -> None:
    """Fixed (router/receiver/bands.py): the hold lasted 10 s after the group's band had
    nothing new, far below a group's TTL, so an older record of a lower band (appended
    before the group, passed over because the group's band was higher) was handed out
    between a slow sender's members. It now lasts the group's TTL (`guarantee-ttl-ms`, else
    the router's default), after which the router has swept the group too."""
    consumer = FakeConsumer({("q", 0): (4, 5), ("q.p2", 0): (0, 1)})
    bands = ReceiverBands(consumer, ["q"], 3, ends=FakeEnds(consumer))
    bands.before_poll()
    assert bands.admit(received("q.p2", 0, "g"))
    consumer.positions[("q.p2", 0)] = (1, 1)  # the sender pauses 10 s (its TTL: minutes)
    bands.before_poll()
    bands.idle["q"] -= 10.0
    bands.before_poll()
    consumer.positions[("q", 0)] = (4, 5)  # sought back to 4 by the refused admit
    assert not bands.admit(received("q", 4)), "handed out inside the open group g"
    # Once the group's band had nothing for its TTL, the other bands are read again.
    bands.idle["q"] -= bands.hold_idle_s
    bands.before_poll()
    assert "q" not in bands.open
    bands.rewound.clear()
    assert bands.admit(received("q", 4))


def test_a_groups_own_ttl_bounds_its_hold() -> None:
    consumer = FakeConsumer({("q", 0): (4, 5), ("q.p2", 0): (0, 1)})
    bands = ReceiverBands(consumer, ["q"], 3, ends=FakeEnds(consumer))
    member = received("q.p2", 0, "g")
    member.headers.append((contract.TTL_MS, b"30000"))
    assert bands.admit(member)
    consumer.positions[("q.p2", 0)] = (1, 1)
    bands.before_poll()
    bands.idle["q"] -= 29.0
    bands.before_poll()
    assert bands.open == {"q": 2}
    bands.idle["q"] -= 1.0
    bands.before_poll()
    assert bands.open == {}


def test_a_restarted_receiver_does_not_hand_out_another_band_inside_an_open_group() -> None:
    """Fixed (router/receiver/bandrestore.py): which band a queue's open group is in lived only in
    memory, so a receiver restarted after handing out the first members of a higher-band
    group read the queue's older lower-band record first. A receiver taking partitions
    over now reads each band partition's last record before its committed offset: a
    member that is not the final holds its queue's other bands."""
    # Before the restart: g's member 0 (q.p2@0) handed out and committed; the older
    # ordinary record q@4 was passed over (band 2 first). g's member 1 is not sent yet.
    consumer = FakeConsumer({("q", 0): (4, 5), ("q.p2", 0): (1, 1)})
    bands = ReceiverBands(consumer, ["q"], 3, ends=FakeEnds(consumer))  # the restarted receiver
    g0 = received("q.p2", 0, "g")
    found = {("q.p2", 0): bandrestore.open_member([g0]), ("q", 0): None}
    bands.restore(bandrestore.open_groups(found, ["q"]))
    bands.before_poll()
    assert not bands.admit(received("q", 4)), "q@4 comes between g's members 0 and 1"
    final = received("q.p2", 1, "g", final=True)
    assert bands.admit(final)
    bands.done(final)  # the hold ends once the final is processed
    bands.rewound.clear()
    assert bands.admit(received("q", 4))


def test_only_a_member_before_the_committed_offset_that_is_not_final_holds() -> None:
    o, g0, g1 = received("q", 3), received("q.p2", 0, "g"), received("q.p2", 1, "g", True)
    assert bandrestore.open_member([]) is None
    assert bandrestore.open_member([o]) is None
    assert bandrestore.open_member([g0, g1]) is None
    assert bandrestore.open_member([g1, g0]) is g0
    # two open on one queue (a shared queue): the one appended last holds
    a = Received("q.p1", 0, 5, None, b"v", [], 2_000, "a", False, None)
    b = Received("q.p2", 0, 5, None, b"v", [], 1_000, "b", False, None)
    held = bandrestore.open_groups({("q.p1", 0): a, ("q.p2", 0): b, ("r", 0): None}, ["q", "r"])
    assert held == {"q": (1, a)}


# ---------------------------------------------------------------- the Receiver, end to end


def test_the_receiver_hands_a_higher_band_group_out_whole_before_an_older_record() -> None:
    """Held: an ordinary record on q (band 0) and a whole group on q.p2 (band 2), fetched
    interleaved: the group comes out whole, then the record, nothing lost."""
    r = banded_receiver(
        {
            ("q.p2", 0): [rec("q.p2", 0, "g", 0), rec("q.p2", 1, "g", 1, final=True)],
            ("q", 0): [rec("q", 0, None)],
        }
    )
    got = []
    while (m := r.poll(0)) is not None:
        got.append(m.value)
        r.done(m)
    assert got == [b"g0", b"g1", b"o0"]


def test_an_abandoned_final_comes_again_before_any_other_band() -> None:
    """Fixed (Receiver.abandon -> ReceiverBands.reopen): the hold ended when the final was
    handed out, so a final the application abandoned came again after a record of another
    band of the same queue whenever the next batch was the lower band's share turn."""
    r = banded_receiver(
        {
            ("q.p2", 0): [rec("q.p2", 0, "g", 0), rec("q.p2", 1, "g", 1, final=True)],
            ("q", 0): [rec("q", 0, None)],
        }
    )
    # band 0 has been passed over with its backlog for a while: its share turn falls on the
    # third batch (it comes 1 in ceil(1 / min_share) batches under a higher band's backlog)
    r._bands.scheduler.credit[0] = 0.75
    got = []
    abandoned = False
    while (m := r.poll(0)) is not None:
        got.append(m.value)
        if m.final and not abandoned:
            abandoned = True
            r.abandon(m)  # the handler failed on the final: it comes again
            continue
        r.done(m)
    assert got == [b"g0", b"g1", b"g1", b"o0"], got


# ---------------------------------------------------------------- receiver-hop lifetimes


NOW = 1_700_000_100_000


def member(extra: list[tuple[str, bytes | None]], ts: int | None = NOW - 1_000) -> Received:
    headers = [(contract.GUARANTEE_ID, b"g"), *extra]
    return Received("q", 0, 7, None, b"v", headers, ts, "g", False, None)


def test_the_send_units_instant_expires_a_message_whose_own_lifetime_the_receiver_rejects() -> None:
    """Fixed (router/receiver/expiry_rules.py `judge`). The send unit validated the message's
    own lifetime against the router's bounds and stamped `router-expires-at`; a Receiver
    with other bounds (built without the router's settings: 30 days by default, while
    `routing.max_lifetime_ms` may be longer; or a stricter `min_lifetime_ms`) found the
    lifetime header out of its bounds and handed the message out as alive, long after the
    send unit's instant: an expiry lost silently."""
    past = str(NOW - 5).encode()
    long = str(60 * 24 * 3600 * 1000).encode()  # 60 days: inside the router's bounds
    m = member([(lifetime.LIFETIME_MS, long), (lifetime.ROUTER_EXPIRES_AT, past)])
    found = judge(m, NOW, ExpiryOptions())  # the receiver's default bound: 30 days
    assert found is not None and found.lifetime.expires_ms == NOW - 5
    strict = ExpiryOptions(min_lifetime_ms=10_000, on_expiry="expire-group")
    short = member([(lifetime.LIFETIME_MS, b"500"), (lifetime.ROUTER_EXPIRES_AT, past)])
    found = judge(short, NOW, strict)
    assert found is not None and found.stops_group  # the receiver's default outcome
    kept = member(
        [
            (lifetime.LIFETIME_MS, b"500"),
            (lifetime.ON_EXPIRY, b"skip"),
            (lifetime.ROUTER_EXPIRES_AT, past),
        ]
    )
    found = judge(kept, NOW, strict)
    assert found is not None and not found.stops_group  # the member's own outcome holds


def test_lifetimes_at_their_bounds() -> None:
    """Held: the bounds are inclusive, the instant is reached exactly at it, a lifetime
    without a record timestamp and no stamped instant stays alive (logged), and an
    unreadable stamped instant too."""
    o = ExpiryOptions(min_lifetime_ms=1, max_lifetime_ms=1_000)
    at_max = member([(lifetime.LIFETIME_MS, b"1000")], ts=NOW - 1_000)
    assert judge(at_max, NOW, o) is not None  # ts + 1000 == NOW: expired at the instant
    assert judge(at_max, NOW - 1, o) is None
    at_min = member([(lifetime.LIFETIME_MS, b"1")], ts=NOW - 1)
    assert judge(at_min, NOW, o) is not None
    assert judge(member([(lifetime.LIFETIME_MS, b"1")], ts=None), NOW, o) is None
    assert judge(member([(lifetime.ROUTER_EXPIRES_AT, b"soon")]), NOW, o) is None


def test_a_record_held_after_a_failure_is_not_skipped_by_the_band_hold() -> None:
    """Fixed (router/receiver/client.py `_received`). One `consume()` batch held, in fetch order,
    q@1 (band 0), g's first member (band 2), q@2. Handing out q@1 failed (Redis or the
    events topic away: `Redeliveries` rewinds q to 1 and pauses it for a while); then g
    opened in band 2, and q@2, of another band, made the band hold seek q to 2: past the
    held q@1, which was never read again, and the commit went past it. Lost silently."""
    r = banded_receiver({("q", 0): [rec("q", 0, None), rec("q", 1, None), rec("q", 2, None)]})
    consumer = r._consumer
    consumer.logs[("q.p2", 0)] = []
    consumer.at[("q.p2", 0)] = 0
    consumer.arrivals = [rec("q.p2", 0, "g", 0), rec("q.p2", 1, "g", 1, final=True)]
    consumer.order = [("q", 0), ("q", 0), ("q.p2", 0), ("q", 0), ("q.p2", 0)]
    judge = r._redo._judge
    failed = []

    def flaky(tp: Any, m: Received) -> bool:
        if m.topic == "q" and m.offset == 1 and not failed:
            failed.append(m.offset)
            raise ConnectionError("Redis away")
        return bool(judge(tp, m))

    r._redo._judge = flaky
    got = []
    for m in r.consume(10, 0):
        got.append(m.value)
        r.done(m)
    assert failed == [1] and got == [b"o0", b"g0", b"g1"]
    r._redo._held = {tp: (0.0, at) for tp, (_, at) in r._redo._held.items()}  # pause over
    while (m := r.poll(0)) is not None:
        got.append(m.value)
        r.done(m)
    assert sorted(got) == [b"g0", b"g1", b"o0", b"o1", b"o2"], got
    assert got.index(b"o1") < got.index(b"o2")
    assert max(o for t, _, o in consumer.stored if t == "q") == 3


def test_a_queue_without_bands_does_not_hide_the_other_queues_bands() -> None:
    """Fixed (router/receiver/bands.py `ReceiverBands.of`). The Receiver took the fewest
    bands of its queues for all of them: one queue without band topics (the harness's
    collector reads the events topic beside the receive queues) and it read no band topic
    at all, so every message of a higher band stayed unread, without a word."""
    topics = {"q", "q.p1", "q.p2", "events"}
    bands = ReceiverBands.of(FakeConsumer({}), ["q", "events"], topics, {})
    assert bands is not None and bands.topics == ["q", "q.p1", "q.p2", "events"]


def test_another_record_of_the_groups_band_ends_its_hold() -> None:
    """A group that ends without its final reaching the queue (stopped, expired, its final
    dead-lettered) holds the other bands only until another record of its own band comes:
    the router appends nothing to the queue inside an open group's span, so that record
    shows the group ended. Without it the other bands waited for the group's TTL."""
    consumer = FakeConsumer({("q", 0): (4, 5), ("q.p2", 0): (0, 3)})
    bands = ReceiverBands(consumer, ["q"], 3, ends=FakeEnds(consumer))
    bands.before_poll()
    assert bands.admit(received("q.p2", 0, "g"))
    assert bands.admit(received("q.p2", 1, "g"))  # its own member: still held
    assert bands.open == {"q": 2}
    assert not bands.admit(received("q", 4))
    assert bands.admit(received("q.p2", 2))  # an ordinary record after g: g ended
    assert bands.open == {}
    bands.rewound.clear()
    assert bands.admit(received("q", 4))
    # ... and a new group of the same band takes the hold over
    assert bands.admit(received("q.p2", 3, "h"))
    assert bands.open == {"q": 2} and bands.gids == {"q": "h"}
