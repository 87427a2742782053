"""Lifetime at the receiver hop (router/receiver/expiry_rules.py, receiverexpiry.py): the rules,
the group statuses and gathered groups an expired member leaves, and the order of writes
(the event flushed before the offset moves past the message), on a Receiver fed by a fake
consumer whose letters are recorded instead of produced. No Kafka, no Redis: the real
thing is tests/integration/receiver/test_receiver_expiry.py."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from router import contract
from router.config import RouterSettings
from router.contract import BadInput, events, lifetime, schemas
from router.receiver.expiry import ReceiverExpiry
from router.receiver.expiry_rules import ExpiryOptions, judge
from router.receiver.letters import ReceiverLetters
from router.receiver.received import Gatherer, Received
from router.receiver.redelivery import Redeliveries
from router.state.groups import GroupStatus, advance, expired
from tests.fixtures.fakes import FakeMessage
from tests.fixtures.receivers import FeedConsumer, fake_receiver

NOW = 1_700_000_100_000
PAST = str(NOW - 1).encode()
LATER = str(NOW + 60_000).encode()
Headers = list[tuple[str, bytes | None]]


def received(
    offset: int,
    gid: str | None = None,
    seq: int | None = None,
    *,
    final: bool = False,
    extra: Headers | None = None,
    ts: int | None = NOW - 1_000,
) -> Received:
    headers: Headers = [*contract.headers_for(gid, final=final, seq=seq), *(extra or [])]
    headers = [(k, v) for k, v in headers if v is not None]
    return Received("q", 0, offset, None, b"v", headers, ts, gid, final, seq)


def at(instant: bytes, key: str = lifetime.EXPIRES_AT) -> Headers:
    return [(key, instant)]


# ---------------------------------------------------------------- the rules


def test_a_message_without_a_lifetime_or_still_alive_is_handed_out() -> None:
    o = ExpiryOptions()
    assert judge(received(0), NOW, o) is None
    assert judge(received(0, extra=at(LATER)), NOW, o) is None
    assert judge(received(0, extra=[(lifetime.LIFETIME_MS, b"60000")]), NOW, o) is None
    assert judge(received(0, extra=[(lifetime.ON_EXPIRY, b"skip")]), NOW, o) is None


def test_an_expired_ordinary_message_names_the_receiver_hop() -> None:
    found = judge(received(0, extra=at(PAST)), NOW, ExpiryOptions())
    assert found is not None
    assert found.reason.code == "expired" and "receiver" in found.reason.detail
    assert found.lifetime.expires_ms == NOW - 1
    assert (found.on_expiry, found.gap, found.stops_group, found.ends_group) == (
        None,
        False,
        False,
        False,
    )


def test_the_instant_is_reached_exactly_at_it_and_the_earliest_header_wins() -> None:
    o = ExpiryOptions()
    assert judge(received(0, extra=at(str(NOW).encode())), NOW, o) is not None
    assert judge(received(0, extra=at(str(NOW + 1).encode())), NOW, o) is None
    # the send unit's stamp is earlier than the producer's own instant: it wins
    both = [*at(LATER), *at(PAST, lifetime.ROUTER_EXPIRES_AT)]
    found = judge(received(0, extra=both), NOW, o)
    assert found is not None and found.lifetime.expires_ms == NOW - 1
    # a relative lifetime counts from the record's timestamp
    rel = [(lifetime.LIFETIME_MS, b"500")]
    assert judge(received(0, extra=rel, ts=NOW - 499), NOW, o) is None
    assert judge(received(0, extra=rel, ts=NOW - 500), NOW, o) is not None


def test_a_member_skipped_leaves_a_gap_and_its_group_goes_on() -> None:
    found = judge(received(3, "g", 1, extra=at(PAST)), NOW, ExpiryOptions())
    assert found is not None
    assert (found.on_expiry, found.gap, found.stops_group, found.ends_group) == (
        "skip",
        True,
        False,
        False,
    )
    assert (found.reason.guarantee_id, found.reason.seq, found.reason.final) == ("g", 1, False)


def test_expire_group_stops_the_group_by_header_or_by_default() -> None:
    own = [*at(PAST), (lifetime.ON_EXPIRY, b"expire-group")]
    found = judge(received(3, "g", 1, extra=own), NOW, ExpiryOptions())
    assert found is not None and found.stops_group and found.ends_group and not found.gap
    by_default = judge(
        received(3, "g", 1, extra=at(PAST)), NOW, ExpiryOptions(on_expiry="expire-group")
    )
    assert by_default is not None and by_default.stops_group
    header_wins = [*at(PAST), (lifetime.ON_EXPIRY, b"skip")]
    skipped = judge(
        received(3, "g", 1, extra=header_wins), NOW, ExpiryOptions(on_expiry="expire-group")
    )
    assert skipped is not None and skipped.gap


def test_an_expired_final_ends_its_group_under_either_outcome() -> None:
    for outcome in (b"skip", b"expire-group"):
        extra = [*at(PAST), (lifetime.ON_EXPIRY, outcome)]
        found = judge(received(3, "g", 2, final=True, extra=extra), NOW, ExpiryOptions())
        assert found is not None and found.ends_group and not found.stops_group


def test_an_unreadable_lifetime_is_handed_out_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    for bad in (at(b"soon"), [(lifetime.LIFETIME_MS, b"0")], [*at(PAST), *at(PAST)]):
        assert judge(received(7, extra=bad), NOW, ExpiryOptions()) is None
    assert caplog.text.count("handed out as alive") == 3


def test_options_are_checked_and_taken_from_the_routing_settings() -> None:
    with pytest.raises(ValueError, match="lifetime bounds"):
        ExpiryOptions(min_lifetime_ms=10, max_lifetime_ms=5)
    with pytest.raises(ValueError, match="on_expiry"):
        ExpiryOptions(on_expiry="drop")  # type: ignore[arg-type]
    s = RouterSettings.model_validate(
        {"routing": {"min_lifetime_ms": 5, "max_lifetime_ms": 9_000, "on_expiry": "expire-group"}}
    )
    assert ExpiryOptions.of(s) == ExpiryOptions(5, 9_000, "expire-group")


# ---------------------------------------------------------------- group statuses


def test_a_skipped_member_moves_the_status_on_and_is_listed() -> None:
    s0 = advance(None, "g", "q", 0, 10, 0, False)
    s1 = expired(s0, "g", "q", 0, 11, 1, False, False)
    assert s1 is not None
    assert (s1.offset, s1.last_seq, s1.complete, s1.expired, s1.expired_seqs) == (
        11,
        1,
        False,
        1,
        (1,),
    )
    assert s1.done_count == 1  # expired is not done
    s2 = advance(s1, "g", "q", 0, 12, 2, True)
    assert s2 is not None and s2.complete and s2.finished
    assert (s2.done_count, s2.expired_seqs) == (2, (1,))  # the gap stays on record
    assert expired(s1, "g", "q", 0, 11, 1, False, False) is None  # read again: no change


def test_an_expired_final_completes_and_expire_group_stops_the_status() -> None:
    s0 = advance(None, "g", "q", 0, 10, 0, False)
    done = expired(s0, "g", "q", 0, 11, 1, True, False)
    assert done is not None and done.complete and done.finished and done.expired_seqs == (1,)
    stopped = expired(s0, "g", "q", 0, 11, 1, False, True)
    assert stopped is not None and stopped.stopped and not stopped.complete and stopped.finished
    # a later opening of the same ID starts afresh
    again = advance(stopped, "g", "q", 0, 20, 0, False)
    assert again is not None and again.expired_seqs == () and not again.stopped
    first = expired(None, "h", "q", 0, 3, None, False, False)
    assert first is not None and (first.expired, first.expired_seqs, first.done_count) == (1, (), 0)


def test_a_status_read_back_from_json_is_equal() -> None:
    s = GroupStatus("g", "q", 0, 11, 1, False, 1, 1, (1,), False)
    doc = asdict(s)
    del doc["gid"]
    assert GroupStatus(gid="g", **json.loads(json.dumps(doc))) == s
    old = {"queue": "q", "partition": 0, "offset": 1, "last_seq": 0, "complete": True}
    assert GroupStatus(gid="g", **old).expired_seqs == ()  # written before this change


# ---------------------------------------------------------------- receive_group


def test_receive_group_reports_a_skipped_member_and_ends_a_group_at_once() -> None:
    g = Gatherer()
    assert g.next_ready(0.0, 60.0) is None  # in use by receive_group
    g.add(received(0, "a", 0), 0.0)
    g.expired(received(1, "a", 1), ends_group=False)
    g.add(received(2, "a", 2, final=True), 0.0)
    whole = g.next_ready(0.0, 60.0)
    assert whole is not None and not whole.complete and whole.expired_seqs == (1,)
    assert [m.seq for m in whole.messages] == [0, 2]
    g.add(received(3, "b", 0), 0.0)
    g.expired(received(4, "b", 1, final=True), ends_group=True)
    ended = g.next_ready(0.0, 60.0)  # at once, not after incomplete_after
    assert ended is not None and not ended.complete and ended.expired_seqs == (1,)
    assert g.next_ready(0.0, 60.0) is None


# ---------------------------------------------------------------- the receiver


class Letters(ReceiverLetters):
    """Records what would be produced, and each flush, in the consumer's log."""

    def __init__(self, log: list[Any]) -> None:
        super().__init__(
            {"bootstrap.servers": "unused:1"},
            "fake",
            dead_letter_topic="t.dlq",
            events_topic="t.events",
            topology="t",
            max_value_bytes=1 << 20,
        )
        self.log = log

    def _produce(self, topic: str, key: bytes | None, value: bytes, headers: Any) -> None:
        self.log.append(("produce", topic, dict(headers)))

    def flush(self, timeout: float = 0) -> None:
        self.log.append(("flush",))


class LoggedConsumer(FeedConsumer):
    def __init__(self, feed: list[FakeMessage | None]) -> None:
        super().__init__(feed)
        self.log: list[Any] = []

    def store_offsets(self, offsets: list[Any]) -> None:
        super().store_offsets(offsets)
        self.log += [("store", tp.offset) for tp in offsets]


def receiver(feed: list[FakeMessage], options: ExpiryOptions | None = None) -> Any:
    r = fake_receiver([])
    r._bands = None  # no priority bands (engineer A's receiver change)
    r._consumer = consumer = LoggedConsumer(list(feed))  # type: ignore[assignment]
    redo = r._redo
    redo._letters = letters = Letters(consumer.log)
    redo.expiry = ReceiverExpiry(
        options or ExpiryOptions(), letters, redo.counts, redo.ledger, None
    )
    redo.expiry.clock_ms = lambda: NOW
    redo.bind(consumer, r._offsets, r._gather)
    return r


def fed(offset: int, gid: str | None = None, seq: int | None = None, **kw: Any) -> FakeMessage:
    final = kw.pop("final", False)
    extra = kw.pop("extra", [])
    headers = [(k, v) for k, v in contract.headers_for(gid, final=final, seq=seq) if v is not None]
    return FakeMessage("q", 0, offset, f"m{offset}".encode(), None, [*headers, *extra])


def handed(r: Any) -> list[bytes | None]:
    """Everything the fake consumer holds, polled until it is empty, each marked done."""
    out = []
    while r._consumer.feed or (m := r.poll(0)) is not None:
        if r._consumer.feed and (m := r.poll(0)) is None:
            continue  # that record was not handed out
        out.append(m.value)
        r.done(m)
    return out


def test_an_expired_message_is_never_handed_out_and_its_event_comes_before_the_offset() -> None:
    r = receiver([fed(0), fed(1, extra=at(PAST)), fed(2, extra=at(LATER))])
    assert handed(r) == [b"m0", b"m2"]
    log = r._consumer.log
    kinds = [e[0] for e in log]
    assert kinds == ["store", "produce", "flush", "store", "store"], log
    produced = log[1]
    assert produced[1] == "t.events"
    assert produced[2][schemas.SCHEMA_HEADER] == events.EXPIRED_MESSAGE.encode()
    assert [e[1] for e in log if e[0] == "store"] == [1, 2, 3]  # past the expired one
    assert r._redo.expiry.count == 1


def test_a_message_read_again_after_its_expiry_was_recorded_is_skipped_not_reported_twice() -> None:
    r = receiver([fed(0, extra=at(PAST))])
    assert handed(r) == []
    r._consumer.feed.append(fed(0, extra=at(PAST)))  # a restart reads it again
    r._offsets.rewind(("q", 0), 0)
    assert handed(r) == []
    assert sum(1 for e in r._consumer.log if e[0] == "produce") == 1


def test_under_expire_group_the_rest_of_the_group_is_dead_lettered_never_handed_out() -> None:
    stop = [*at(PAST), (lifetime.ON_EXPIRY, b"expire-group")]
    r = receiver(
        [
            fed(0, "g", 0),
            fed(1, "g", 1, extra=stop),
            fed(2, None),
            fed(3, "g", 2),
            fed(4, "g", 3, final=True),
            fed(5, "g", 0),  # the ID again, after its final: a new group
        ]
    )
    assert handed(r) == [b"m0", b"m2", b"m5"]
    kind = schemas.SCHEMA_HEADER
    produced = [
        (e[1], e[2][kind], e[2].get("reason")) for e in r._consumer.log if e[0] == "produce"
    ]
    assert produced == [
        ("t.events", events.EXPIRED_MESSAGE.encode(), None),
        ("t.events", events.GROUP_STOPPED.encode(), None),
        ("t.dlq", events.DEAD_LETTER.encode(), b"group-stopped"),
        ("t.dlq", events.DEAD_LETTER.encode(), b"group-stopped"),
    ]


def test_under_skip_the_group_goes_on_without_its_member() -> None:
    r = receiver([fed(0, "g", 0), fed(1, "g", 1, extra=at(PAST)), fed(2, "g", 2, final=True)])
    assert handed(r) == [b"m0", b"m2"]


def test_receive_group_gets_the_group_without_its_expired_member() -> None:
    r = receiver([fed(0, "g", 0), fed(1, "g", 1, extra=at(PAST)), fed(2, "g", 2, final=True)])
    group = r.receive_group(5)
    assert [m.value for m in group.messages] == [b"m0", b"m2"]
    assert not group.complete and group.expired_seqs == (1,)


def test_without_an_events_topic_lifetimes_are_not_checked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    redo = Redeliveries({}, "c", None, ["orders"], None, "router", None, None, ExpiryOptions())
    assert redo.expiry.options is None
    assert not redo.expiry.expired(("orders", 0), received(0, extra=at(PAST)))  # handed out
    assert "lifetimes are not checked" in caplog.text


def test_letters_without_an_events_topic_refuse_to_expire_silently() -> None:
    letters = ReceiverLetters(
        {"bootstrap.servers": "unused:1"},
        "c",
        dead_letter_topic=None,
        events_topic=None,
        topology="",
        max_value_bytes=10,
    )
    with pytest.raises(Exception, match="no events topic"):
        letters.expired(received(0), BadInput("expired", "x"), NOW, None)


class Statuses:
    """A StatusStore in memory: the same rules (`router.state.groups`), no Redis."""

    def __init__(self) -> None:
        self.by_gid: dict[str, GroupStatus] = {}

    def record(self, members: Any) -> None:
        for m in members:
            if m.guarantee_id is not None:
                self._put(
                    advance(
                        self.by_gid.get(m.guarantee_id),
                        m.guarantee_id,
                        m.topic,
                        m.partition,
                        m.offset,
                        m.seq,
                        m.final,
                    )
                )

    def expired(self, m: Received, stopped: bool) -> None:
        g = str(m.guarantee_id)
        old = self.by_gid.get(g)
        self._put(expired(old, g, m.topic, m.partition, m.offset, m.seq, m.final, stopped))

    def _put(self, s: GroupStatus | None) -> None:
        if s is not None:
            self.by_gid[s.gid] = s


def with_statuses(feed: list[FakeMessage]) -> tuple[Any, Statuses]:
    r = receiver(feed)
    r._status = statuses = Statuses()
    r._redo.expiry.status = statuses
    return r, statuses


def test_an_expired_members_status_waits_for_the_members_before_it() -> None:
    """g0 handed out, g1 expired, g2 handed out: the status says nothing of g1 until g0 is
    done (a status never claims a member before it was processed), then lists it."""
    r, st = with_statuses(
        [fed(0, "g", 0), fed(1, "g", 1, extra=at(PAST)), fed(2, "g", 2, final=True)]
    )
    g0 = r.poll(0)
    assert r.poll(0) is None  # g1: expired, not handed out
    g2 = r.poll(0)
    assert (g0.value, g2.value) == (b"m0", b"m2")
    assert "g" not in st.by_gid
    r.done(g0)
    s = st.by_gid["g"]
    assert (s.offset, s.last_seq, s.expired_seqs, s.complete) == (1, 1, (1,), False)
    r.done(g2)
    s = st.by_gid["g"]
    assert (s.offset, s.complete, s.done_count, s.expired_seqs) == (2, True, 2, (1,))


def test_done_out_of_order_still_lists_the_expired_member_once() -> None:
    r, st = with_statuses(
        [fed(0, "g", 0), fed(1, "g", 1, extra=at(PAST)), fed(2, "g", 2, final=True)]
    )
    g0, _, g2 = r.poll(0), r.poll(0), r.poll(0)
    r.done(g2)  # the final first: the status is at its offset already
    r.done(g0)
    s = st.by_gid["g"]
    assert (s.offset, s.complete, s.expired_seqs, s.expired) == (2, True, (1,), 1)
