"""The chaos run's QoS shares (ops/harness/traffic/workload.py `qos`), and the verdict over them
(ops/harness/verdict/accounts.py, verify.py): every multicast message once on each of its
queues, every message delivered, expired or dead-lettered, never two of them."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from ops.harness.scenarios.chaos_result import ChaosResult, summary
from ops.harness.traffic.collect import expired_seen
from ops.harness.traffic.workload import LIFETIMES, WorkloadSpec, plan
from ops.harness.verdict.accounts import EVENT_ID_HEADER, ExpiredSeen, LetterSeen, account
from ops.harness.verdict.records import Seen, Sent, deliveries
from ops.harness.verdict.verify import verify
from router.contract import lifetime, multicast

QUEUES = ("t.recv.0", "t.recv.1", "t.recv.2", "t.recv.3")


def spec(**kw: object) -> WorkloadSpec:
    base: dict[str, object] = {"run_id": "t", "senders": 2, "messages": 4000, "max_group": 10}
    return WorkloadSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_the_shares_leave_the_rest_of_the_seeded_plan_as_it_was() -> None:
    plain = [s for i in range(2) for s, _ in plan(spec(), i)]
    mixed = [
        s
        for i in range(2)
        for s, _ in plan(
            spec(multicast_fraction=0.1, expiring_fraction=0.1, receive_queues=QUEUES), i
        )
    ]
    strip = [(s.event_id, s.group, s.seq, s.final) for s in mixed]
    assert strip == [(s.event_id, s.group, s.seq, s.final) for s in plain]
    assert all(s.queues is None and not s.expires for s in plain)


def test_the_shares_are_what_was_asked_and_each_message_carries_its_headers() -> None:
    s = spec(multicast_fraction=0.1, expiring_fraction=0.1, receive_queues=QUEUES)
    pairs = [p for i in range(2) for p in plan(s, i)]
    ordinary = [(m, c) for m, c in pairs if m.group is None]
    fanned = [(m, c) for m, c in ordinary if m.queues is not None]
    assert 0.07 < len(fanned) / len(ordinary) < 0.13
    subsets = 0
    for m, c in fanned:
        h = dict(c["headers"])
        assert h[multicast.DELIVERY] == b"multicast" and not m.expires
        named = h.get(multicast.QUEUES)
        if named is None:
            assert m.queues == QUEUES
        else:
            subsets += 1
            assert named.decode().split(",") == list(m.queues or ())
            assert 1 <= len(m.queues or ()) < len(QUEUES)
    assert subsets > 0
    expiring = [(m, c) for m, c in pairs if m.expires]
    assert all(not m.final and m.queues is None for m, _ in expiring)  # finals never expire
    members = [(m, c) for m, c in expiring if m.group is not None]
    assert members and 0.07 < len(members) / sum(1 for m, _ in pairs if m.group) < 0.13
    kinds: Counter[tuple[str, bytes]] = Counter()
    for m, c in expiring:
        h = dict(c["headers"])
        assert h[EVENT_ID_HEADER] == m.event_id.encode()
        assert (h.get(lifetime.ON_EXPIRY) == b"skip") == (m.group is not None)
        kinds.update(kv for kv in c["headers"] if kv in LIFETIMES)
    assert set(kinds) == set(LIFETIMES)


def test_deliveries_count_a_copy_per_target_queue() -> None:
    sent = [
        Sent("a", None, 0, False),
        Sent("m", None, 0, False, QUEUES[:3]),
        Sent("x", "g", 0, True),
    ]
    assert deliveries(sent) == 5


def gone(
    event_id: str | None, hop: str = "SEND_UNIT", expires: int = 10, at: int = 20
) -> ExpiredSeen:
    return ExpiredSeen(event_id, hop, f"q[0]@{hash(event_id) % 100}", expires, at)


def test_every_message_is_delivered_expired_or_dead_lettered_exactly_once() -> None:
    g = [Sent("g0", "G", 0, False, None, True), Sent("g1", "G", 1, False), Sent("g2", "G", 2, True)]
    sent = [
        *g,
        Sent("alive", None, 0, False, None, True),
        Sent("late", None, 0, False, None, True),
        Sent("m", None, 0, False, ("q1", "q2")),
        Sent("plain", None, 0, False),
    ]
    seen = [
        Seen("q1", 0, "g1", "G", 1, False),
        Seen("q1", 1, "g2", "G", 2, True),
        Seen("q2", 0, "alive", None, 0, False),
        Seen("q1", 2, "m", None, 0, False),
        Seen("q2", 1, "m", None, 0, False),
        Seen("q2", 2, "plain", None, 0, False),
    ]
    r = verify(sent, seen, expired=[gone("g0"), gone("late", "RECEIVE_UNIT")], dead=[])
    assert r.violations() == []
    assert (r.sent, r.received, r.lost, r.groups_complete) == (8, 6, 0, 1)
    assert r.multicast_sent == 1 and r.multicast_copies == 2
    a = r.accounts
    assert a is not None
    assert (a.expiring_sent, a.expiring_delivered, a.expired) == (3, 1, 2)
    assert a.expired_by_hop == Counter({"SEND_UNIT": 1, "RECEIVE_UNIT": 1})
    assert a.accounted() == "delivered 1, expired 2 (receive_unit 1, send_unit 1), dead-lettered 0"
    # neither delivered nor expired: lost, and its group is not complete
    r = verify(sent, seen, expired=[gone("late")], dead=[])
    assert r.lost == 1 and r.lost_examples == ["g0"] and r.groups_complete == 0
    # without reading the events topic, every expired message is lost
    assert verify(sent, seen).lost == 2


def test_each_way_an_expiry_can_be_wrong_is_counted() -> None:
    sent = [
        Sent("a", None, 0, False, None, True),
        Sent("b", None, 0, False, None, True),
        Sent("c", None, 0, False),
        Sent("d", None, 0, False, None, True),
    ]
    a, accounted = account(
        {s.event_id: s.expires for s in sent},
        {"b"},
        [
            gone("a"),
            gone("a"),  # twice
            gone("b"),  # and delivered
            gone("c"),  # sent without a lifetime
            gone("stranger"),
            gone("d", expires=30, at=20),  # before its instant
        ],
        [LetterSeen("x", "group-entry-missing")],
    )
    assert (a.expired_twice, a.expired_and_delivered, a.expired_unexpected, a.expired_early) == (
        1,
        1,
        2,
        1,
    )
    assert a.dead_lettered == 1 and a.dead_reasons == Counter({"group-entry-missing": 1})
    assert {v.split("=")[0] for v in a.violations()} == {
        "expired_twice",
        "expired_and_delivered",
        "expired_unexpected",
        "expired_early",
        "dead_lettered",
    }
    assert accounted == {"a", "b", "c", "d", "x"}  # c: reported above, not lost as well
    assert len(a.examples) == 5


def test_an_expired_message_event_is_read_back_by_its_event_id_header() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    event = {
        "hop": "RECEIVE_UNIT",
        "source_topic": "t.transfer",
        "source_partition": 3,
        "source_offset": 17,
        "expires_at": t,
        "expired_at": t,
        "headers": [
            {"key": "guarantee-id", "value": b"G"},
            {"key": EVENT_ID_HEADER, "value": b"e1"},
        ],
    }
    ms = round(t.timestamp() * 1000)
    assert expired_seen(event) == ExpiredSeen("e1", "RECEIVE_UNIT", "t.transfer[3]@17", ms, ms)
    assert expired_seen({**event, "headers": [], "expires_at": None}).event_id is None


def test_the_chaos_summary_prints_the_multicast_and_lifetime_figures() -> None:
    sent = [Sent("e", None, 0, False, None, True), Sent("m", None, 0, False, ("q1", "q2"))]
    seen = [Seen("q1", 0, "m", None, 0, False), Seen("q2", 0, "m", None, 0, False)]
    report = verify(sent, seen, expired=[gone("e")], dead=[])
    text = "\n".join(summary(ChaosResult(report)))
    assert "messages, 2 copies expected" in text
    assert "with a lifetime" in text and "delivered 0, expired 1 (send_unit 1)" in text
    assert "RESULT: PASS" in text
