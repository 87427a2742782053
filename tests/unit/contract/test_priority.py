"""Priority bands without servers: the header and its bounds, bands and their topics, the
band scheduler's minimum share, and the steps that stamp and retarget bands."""

from __future__ import annotations

import itertools
import random

import pytest
from pydantic import ValidationError

from router import contract
from router.config import RouterSettings
from router.contract import BadInput, bandsched, priority
from router.contract.bandsched import BandScheduler, Turn
from router.receiver.bands import ReceiverBands
from router.security import acls
from router.table.routing import STOPPING
from router.topology import topics
from router.topology.side import side_spec
from router.unit.steps.bands import BandStep
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.emit.emitter import Emitter
from tests.fixtures.bands import FakeConsumer, FakeEnds, MemoryBands, received
from tests.fixtures.fakes import FakeMessage, msg

P = priority.PRIORITY


def settings(bands: int = 3, **priority_settings: object) -> RouterSettings:
    return RouterSettings(
        topology={"name": "t", "send_queue_count": 1, "receive_queue_count": 2},
        priority={"bands": bands, **priority_settings},
    )


# ---------------------------------------------------------------- the header


@pytest.mark.parametrize("value", [b"0", b"5", b"9", b" 7 "])
def test_a_priority_is_one_digit(value: bytes) -> None:
    assert priority.read([("x", b"1"), (P, value)]) == int(value)


def test_no_header_is_none_and_the_default_band_is_the_lowest() -> None:
    assert priority.read([("x", b"1")]) is None
    assert priority.read(None) is None
    assert priority.band_of(None, 3) == 0 == priority.DEFAULT_PRIORITY


@pytest.mark.parametrize("value", [b"10", b"-1", b"", None, b"high", b"\xff", b"1.5", b"\xd9\xa3"])
def test_a_malformed_priority_is_bad_input(value: bytes | None) -> None:
    with pytest.raises(BadInput) as bad:
        priority.read([(P, value)])
    assert bad.value.code == "bad-priority"


def test_a_priority_given_twice_is_bad_input() -> None:
    with pytest.raises(BadInput, match="more than once"):
        priority.read([(P, b"1"), (P, b"1")])


def test_priorities_fall_in_bands_evenly_and_monotonically() -> None:
    assert [priority.band_of(p, 3) for p in range(10)] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [priority.band_of(p, 1) for p in range(10)] == [0] * 10
    assert [priority.band_of(p, 10) for p in range(10)] == list(range(10))
    for n in range(1, 11):
        got = [priority.band_of(p, n) for p in range(10)]
        assert got == sorted(got) and got[0] == 0 and got[-1] == n - 1
        assert set(got) == set(range(n))  # every band is reachable
    with pytest.raises(ValueError):
        priority.band_of(10, 3)
    with pytest.raises(ValueError):
        priority.band_of(1, 11)


def test_band_topics_are_named_and_split_back() -> None:
    assert priority.band_topics("t.send.1", 3) == ["t.send.1", "t.send.1.p1", "t.send.1.p2"]
    bases = {"t.send.1", "t.transfer"}
    assert priority.split("t.send.1.p2", bases) == ("t.send.1", 2)
    assert priority.split("t.transfer", bases) == ("t.transfer", 0)
    assert priority.split("t.other.p2", bases) == ("t.other.p2", 0)  # not a base's band
    assert priority.split("t.room.send", bases) == ("t.room.send", 0)


def test_stamping_replaces_any_band_a_producer_wrote() -> None:
    headers = priority.stamp([("a", b"1"), (priority.BAND, b"9")], 2)
    assert headers == [("a", b"1"), (priority.BAND, b"2")]
    assert priority.stamped_band(headers) == 2
    assert priority.stamped_band([(priority.BAND, b"x")]) == 0
    assert priority.stamped_band(None) == 0


# ---------------------------------------------------------------- settings and topics


def test_settings_bound_bands_and_the_minimum_share() -> None:
    assert settings(1).priority.bands == 1
    assert RouterSettings().priority.bands == 1  # off unless asked for
    for bad in ({"bands": 0}, {"bands": 11}, {"bands": 3, "min_share": 0.3}, {"min_share": 0}):
        with pytest.raises(ValidationError):
            RouterSettings(priority=bad)


def test_a_topology_with_bands_has_a_topic_per_band_at_every_hop() -> None:
    s = settings(3)
    names = {t.name: t for t in topics.plan(s)}
    for base in ("t.send.1", "t.transfer", "t.recv.1", "t.recv.2"):
        for band in priority.band_topics(base, 3):
            assert band in names
            assert names[band].partitions == names[base].partitions
    assert "t.room.send.p1" not in names and "t.events.p1" not in names
    assert side_spec(s, "send").sources == ("t.send.1", "t.send.1.p1", "t.send.1.p2")
    assert side_spec(s, "receive").sources == ("t.transfer", "t.transfer.p1", "t.transfer.p2")
    assert len(topics.plan(settings(1))) == len(names) - 2 * 4  # one band: as before


# ---------------------------------------------------------------- the scheduler


def test_the_highest_band_with_a_backlog_goes_first() -> None:
    s = BandScheduler(3, 0.1)
    assert s.next([0, 0, 0]) == Turn(frozenset({0, 1, 2}))
    assert s.next([5, 0, 0]) == Turn(frozenset({0, 1, 2}))
    assert s.next([5, 3, 0]) == Turn(frozenset({1, 2}))
    assert s.next([5, 3, 1]) == Turn(frozenset({2}))


def test_a_lower_band_gets_its_minimum_share_and_no_more() -> None:
    s = BandScheduler(2, 0.1)
    turns = [s.next([100, 100]) for _ in range(100)]
    low = [i for i, t in enumerate(turns) if t.share]
    assert all(t.bands == frozenset({0}) for t in turns if t.share)
    assert len(low) == 10
    assert all(b - a == 10 for a, b in itertools.pairwise(low))


def test_no_credit_is_banked_while_a_band_has_nothing() -> None:
    s = BandScheduler(2, 0.25)
    for _ in range(50):
        assert not s.next([0, 9]).share
    assert [s.next([9, 9]).share for _ in range(4)] == [False, False, False, True]


@pytest.mark.parametrize(("bands", "share"), [(2, 0.1), (3, 0.1), (3, 0.25), (5, 0.05), (10, 0.05)])
def test_starvation_is_bounded_whatever_the_backlogs(bands: int, share: float) -> None:
    """Property: in any sequence of backlogs, a band that keeps a backlog is consumed at
    least once in every `starvation_bound` batches, and the highest band with a backlog
    gets at least 1 - share x (bands - 1) of the batches."""
    bound = bandsched.starvation_bound(bands, share)
    rng = random.Random(bands * 1000 + int(share * 100))
    for _ in range(20):
        s = BandScheduler(bands, share)
        waited = [0] * bands
        top_turns = steps = 0
        for _ in range(500):
            backlog = [rng.choice([0, 0, 5, 50]) for _ in range(bands)]
            backlog[0] = 1  # the lowest band always has work: it must not starve
            turn = s.next(backlog)
            top = max(b for b in range(bands) if backlog[b])
            steps += 1
            top_turns += top in turn.bands
            for b in range(bands):
                if b in turn.bands or not backlog[b]:
                    waited[b] = 0
                else:
                    waited[b] += 1
                    assert waited[b] < bound, (b, waited[b], bound)  # served within `bound`
        assert top_turns / steps >= 1 - share * (bands - 1) - 0.02


# ---------------------------------------------------------------- the steps


def classified(s: RouterSettings, *messages: FakeMessage, side: str = "send") -> Batch:
    batch = Batch("u:1", 0)
    Classifier(s, side, {}).classify(batch, list(messages))  # type: ignore[arg-type]
    return batch


def send_step(s: RouterSettings, table: MemoryBands) -> BandStep:
    t = s.topology
    return BandStep(s.priority.bands, t.send_queues, [t.transfer_topic], table)  # type: ignore[arg-type]


def test_a_malformed_priority_is_dead_lettered_where_it_enters() -> None:
    s = settings()
    batch = classified(s, msg(0, "g", seq=0, extra=[(P, b"high")]), msg(1, None, extra=[(P, b"3")]))
    bad, good = batch.items
    assert bad.bad is not None and bad.bad.code == "bad-priority" and bad.bad.guarantee_id == "g"
    assert good.bad is None
    receive = classified(s, msg(0, None, extra=[(P, b"high")]), side="receive")
    assert receive.items[0].bad is None  # checked once, by the send side


def test_a_group_keeps_its_first_members_band() -> None:
    s = settings()
    table = MemoryBands()
    step = send_step(s, table)
    q = "t.send.1"
    batch = classified(
        s,
        msg(0, "g", seq=0, topic=q, extra=[(P, b"9")]),
        msg(1, "g", seq=1, topic=q),  # no header: still band 2
        msg(2, "g", seq=2, topic=q, extra=[(P, b"0")]),  # another header: ignored
        msg(3, None, topic=q, extra=[(P, b"5")]),
        msg(4, None, topic=q),
        msg(0, None, topic=f"{q}.p2", extra=[(P, b"0")]),  # a band queue: its band wins
    )
    step.assign(batch)
    assert [priority.stamped_band(i.headers) for i in batch.items] == [2, 2, 2, 1, 0, 2]
    later = classified(s, msg(5, "g", seq=3, final=True, topic=q, extra=[(P, b"1")]))
    step.assign(later)
    assert priority.stamped_band(later.items[0].headers) == 2  # across batches too
    assert table.calls == 2


def test_an_ended_group_is_forgotten_unless_its_id_was_used_again() -> None:
    s = settings()
    table = MemoryBands()
    step = send_step(s, table)
    first = classified(s, msg(0, "g", seq=0, final=True, extra=[(P, b"9")], topic="t.send.1"))
    step.assign(first)
    first.items[0].decision = "0"
    out = Emitter(s, side_spec(s, "send"), "u").emit(first, 0)
    assert [gid for gid, _ in out.finals] == ["g"]
    step.settle(first, out)
    assert "g" in table.bands  # forgotten with the next call
    again = classified(s, msg(1, "g", seq=0, topic="t.send.1"))  # a new group, same ID
    step.assign(again)
    assert priority.stamped_band(again.items[0].headers) == 0
    assert table.bands["g"][0] == 0


def test_records_for_destinations_go_to_their_bands_topic_with_their_markers() -> None:
    s = settings()
    step = send_step(s, MemoryBands())
    q = "t.send.1"
    batch = classified(
        s,
        msg(0, "g", seq=0, topic=q, extra=[(P, b"9")]),
        msg(1, "g", seq=1, topic=q, extra=[("message-lifetime-ms", b"x")]),  # bad: skipped
        msg(2, "h", seq=0, topic=q, extra=[(P, b"4")]),
        msg(3, None, topic=q),
    )
    step.assign(batch)
    g0, g1, h0, ordinary = batch.items
    assert g1.bad is not None
    g0.decision = g1.decision = "1"
    h0.decision = f"{STOPPING}0"  # stops its group: parked, and a close marker to "0"
    h0.bad = BadInput("bad-headers", "x")
    h0.bad.guarantee_id = "h"
    ordinary.decision = "2"
    out = Emitter(s, side_spec(s, "send"), "u").emit(batch, 0)
    step.retarget(out)
    to_transfer = [(r.topic, r.partition, dict(r.headers)) for r in out.records]
    kinds = [(t, p, h.get(contract.CONTROL)) for t, p, h in to_transfer if t.startswith("t.tr")]
    assert kinds == [
        ("t.transfer.p2", 1, None),  # g's first member
        ("t.transfer.p2", 1, contract.SKIP),  # g's skip marker follows g's band
        ("t.transfer.p1", 0, contract.CLOSE),  # h's close marker, in h's band
        ("t.transfer", 2, None),  # the ordinary message: band 0, the topic itself
    ]
    receive = BandStep(3, (), s.topology.receive_queues, None)
    batch = classified(s, msg(0, None, topic="t.transfer.p2", extra=[(priority.BAND, b"2")]))
    batch.items[0].decision = "t.recv.2"
    out = Emitter(s, side_spec(s, "receive"), "u").emit(batch, 0)
    receive.retarget(out)
    assert [r.topic for r in out.records] == ["t.recv.2.p2"]


# ---------------------------------------------------------------- the receiver's bands


def test_the_receiver_reads_every_band_and_the_highest_backlog_first() -> None:
    topics = {"q", "q.p1", "q.p2", "r", "r.p1", "r.p2"}
    assert ReceiverBands.of(FakeConsumer({}), ["q"], {"q"}, {}) is None
    consumer = FakeConsumer({("q", 0): (0, 100), ("q.p1", 0): (0, 0), ("q.p2", 0): (5, 9)})
    bands = ReceiverBands.of(consumer, ["q"], topics, {})
    assert bands is not None and bands.topics == ["q", "q.p1", "q.p2"]
    bands.ends = FakeEnds(consumer)
    bands.before_poll()
    assert consumer.calls == [("pause", ["q", "q.p1"])]
    consumer.positions[("q.p2", 0)] = (9, 9)  # band 2 drained: every band again
    bands.before_poll()
    assert consumer.calls[-1] == ("resume", ["q", "q.p1"])


def test_the_receiver_never_switches_bands_inside_a_group() -> None:
    consumer = FakeConsumer({("q", 0): (0, 100), ("q.p2", 0): (0, 0)})
    bands = ReceiverBands(consumer, ["q"], 3, ends=FakeEnds(consumer))
    assert bands.admit(received("q", 10, "g"))  # the group opens in band 0
    assert not bands.admit(received("q.p2", 3))  # came after its final: read again later
    assert consumer.calls == [("seek", ("q.p2", 3)), ("pause", ["q.p2"])]
    assert not bands.admit(received("q.p2", 4))  # already fetched behind it: not sought again
    consumer.positions[("q.p2", 0)] = (3, 5)  # band 2 now has a backlog ...
    bands.before_poll()
    assert ("resume", ["q.p2"]) not in consumer.calls  # ... but the group is being handed out
    assert bands.admit(received("q", 11, "g"))
    final = received("q", 12, "g", final=True)
    assert bands.admit(final)  # handed out: the hold lasts until it is done (abandon)
    bands.before_poll()
    assert ("resume", ["q.p2"]) not in consumer.calls
    bands.done(final)  # the group ends
    bands.before_poll()
    assert consumer.calls[-2:] == [("pause", ["q"]), ("resume", ["q.p2"])]
    assert bands.admit(received("q.p2", 3))  # handed out after the group


def test_a_group_whose_band_went_quiet_stops_holding_the_other_bands() -> None:
    consumer = FakeConsumer({("q", 0): (11, 11), ("q.p2", 0): (0, 4)})
    bands = ReceiverBands(consumer, ["q"], 3, ends=FakeEnds(consumer))
    assert bands.admit(received("q", 10, "g"))  # opens; its sender then stops for good
    bands.before_poll()
    assert bands.open == {"q": 0}  # band 0 caught up: idle from now
    bands.idle["q"] -= bands.hold_idle_s  # ... as if that was hold_idle_s ago
    bands.before_poll()
    assert bands.open == {}
    assert consumer.calls[-2:] == [("pause", ["q"]), ("resume", ["q.p2"])]  # band 2 first
    assert bands.admit(received("q.p2", 0))


def test_acls_cover_every_band_topic() -> None:
    s = settings(3)
    reads = {a.name for a in acls.role_acls(s, "send-unit", "User:u") if a.operation == "READ"}
    assert {"t.send.1", "t.send.1.p1", "t.send.1.p2"} <= reads
    writes = {a.name for a in acls.role_acls(s, "receive-unit", "User:u") if a.operation == "WRITE"}
    assert {"t.recv.2", "t.recv.2.p1", "t.recv.2.p2"} <= writes
    assert "t.dlq.p1" not in writes
    receiver = {a.name for a in acls.role_acls(s, "receiver", "User:u") if a.operation == "READ"}
    assert {"t.recv.1.p2", "t.recv.2.p2"} <= receiver
