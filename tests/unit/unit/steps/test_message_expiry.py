"""Adversarial review of per-message lifetime and expiry (`router.contract.lifetime`, the classify
step's `_expiry`, `router.unit.steps.emit.letters`, the drain's `_expired_while_parked`), on pure
harnesses: two hops (send side -> transfer records -> receive side) whose tables are the model, and
the waiting-room harness (`tests.fixtures.roomharness`). No Kafka, no Redis.

Judged from what the hops deliver, dead-letter and write as events only: an expired
message is never delivered, has exactly one ExpiredMessage event, the rest of its group
keeps its order on one queue (skip) or stops (expire-group), and every message is
delivered, expired or dead-lettered. Defects found are strict xfails or fixed (the test
says which)."""

from __future__ import annotations

from typing import Any

import pytest

from router import contract
from router.config import RouterSettings
from router.contract import events, lifetime, schemas
from router.metrics.registry import Metrics
from router.table.model import TableModel
from router.table.routing import STOPPED
from router.topology.side import side_spec
from router.unit.steps import classify
from router.unit.steps.batch import Batch
from router.unit.steps.emit import letters
from router.unit.steps.emit.emitter import Emitter
from router.unit.steps.emit.records import Output
from router.unit.steps.holds import Holds
from router.unit.steps.route import TableRoute
from router.utils.faults import Faults
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.roomharness import LEASE_MS, Side, whole

T0 = 1_700_000_000_000  # the fake messages' CreateTime
Headers = list[tuple[str, bytes | None]]


def at(instant: int) -> Headers:
    return [(lifetime.EXPIRES_AT, str(instant).encode())]


SKIP: Headers = [(lifetime.ON_EXPIRY, b"skip")]
STOP: Headers = [(lifetime.ON_EXPIRY, b"expire-group")]


def hop_settings(policy: str = "share") -> RouterSettings:
    return RouterSettings(
        topology={"name": "t"},  # type: ignore[arg-type]
        routing={"busy_policy": policy},  # type: ignore[arg-type]
    )


class Hop:
    """One side: classify (clock given) -> route (model) -> emit -> settle, committed."""

    def __init__(self, side: str, settings: RouterSettings) -> None:
        self.side = side
        self.s = settings
        self.spec = side_spec(settings, side)  # type: ignore[arg-type]
        self.model = TableModel(list(self.spec.destinations), policy=settings.routing.busy_policy)
        self.emitter = Emitter(settings, self.spec, f"{side}-unit")
        self.n = 0
        self.outs: list[Output] = []
        self.now = 0
        self.route = TableRoute(
            _ModelTable(self),  # type: ignore[arg-type]
            settings.routing,
            Metrics(),
            Holds(1.0, 10.0),
            Faults(),
            side == "send",
        )

    def run(self, now: int, messages: list[FakeMessage]) -> Output:
        self.n += 1
        batch = Batch(f"{self.side}{self.n}", 0)
        classifier = classify.Classifier(self.s, self.side, {})  # type: ignore[arg-type]
        classifier.clock_ms = lambda: now
        classifier.classify(batch, messages)
        self.now = now
        self.route.route(batch)  # the real route step, on the model
        assert batch.failure is None
        out = self.emitter.emit(batch, now)
        self.model.settle(batch.id, sorted(out.ordinary_dests), out.finals)
        for g in out.stopped:
            self.model.release([(g, STOPPED)])
        self.outs.append(out)
        return out


class _ModelTable:
    """What the route step asks of its table, answered by the hop's model."""

    epoch, resets = "e", 0

    def __init__(self, hop: Hop) -> None:
        self.hop = hop

    def route(self, requests: list[Any], batch: str, carried: Any = (), earlier: Any = ()) -> Any:
        hop = self.hop
        return hop.model.route(
            requests, hop.now, batch=batch, lease_ms=LEASE_MS, carried=carried, earlier=earlier
        )


class TwoHops:
    """A send hop and a receive hop; the transfer records become the receive hop's input."""

    def __init__(self, policy: str = "share") -> None:
        self.s = hop_settings(policy)
        self.send = Hop("send", self.s)
        self.receive = Hop("receive", self.s)
        self.transfer_ends: dict[int, int] = {}
        self.delivered: list[tuple[str, bytes | None]] = []  # (queue, value)
        self.dead: list[dict[str, Any]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _collect(self, out: Output) -> list[FakeMessage]:
        transfer: list[FakeMessage] = []
        t = self.s.topology
        for r in out.records:
            if r.topic == t.transfer_topic:
                off = self.transfer_ends.get(r.partition, 0)
                self.transfer_ends[r.partition] = off + 1
                ts = (1, r.timestamp) if r.timestamp else (0, 0)
                transfer.append(
                    FakeMessage(r.topic, r.partition, off, r.value, r.key, list(r.headers), ts)
                )
            elif r.topic == t.dead_letter_topic:
                self.dead.append(schemas.decode(events.DEAD_LETTER, r.value))
            elif r.topic == t.events_topic:
                schema = dict(r.headers)[schemas.SCHEMA_HEADER].decode()
                self.events.append((schema, schemas.decode(schema, r.value)))
            else:
                assert r.topic in t.receive_queues, r.topic
                self.delivered.append((r.topic, r.value))
        return transfer

    def run(self, now_send: int, now_receive: int, messages: list[FakeMessage]) -> None:
        transfer = self._collect(self.send.run(now_send, messages))
        transfer.sort(key=lambda m: (m.partition(), m.offset()))
        if transfer:
            self._collect(self.receive.run(now_receive, transfer))

    def expired(self) -> list[dict[str, Any]]:
        return [e for s, e in self.events if s == events.EXPIRED_MESSAGE]

    def values(self) -> list[bytes | None]:
        return [v for _, v in self.delivered]


def member(offset: int, gid: str, seq: int, final: bool = False, extra: Headers = ()) -> Any:  # type: ignore[assignment]
    return msg(offset, gid, seq=seq, final=final, value=f"{gid}{seq}".encode(), extra=list(extra))


# ---------------------------------------------------------------- (e) malformed headers


@pytest.mark.parametrize("key", [lifetime.EXPIRES_AT, lifetime.LIFETIME_MS])
def test_a_lifetime_of_thousands_of_digits_is_bad_input_not_a_crash(key: str) -> None:
    """FIXED (router/contract/lifetime.py): `int()` of more than 4,300 digits raises ValueError,
    which escaped `lifetime.read` and the classify step: one such header on a send queue
    crashed every unit that read it (a poison pill), instead of being `bad-lifetime`."""
    huge = msg(0, "g", seq=0, extra=[(key, b"1" * 5000)])
    batch = Batch("b", 0)
    classify.Classifier(hop_settings(), "send", {}).classify(batch, [huge])
    (item,) = batch.items
    assert item.bad is not None and item.bad.code == "bad-lifetime"
    assert item.bad.guarantee_id == "g"
    # the reader of a stamped instant does not crash on one either
    assert letters.instant([(lifetime.ROUTER_EXPIRES_AT, b"9" * 5000)]) is None


@pytest.mark.parametrize(
    "raw",
    [b"", b" ", b"1e3", b"0x10", b"\xff\xfe", "\u0661\u0662".encode(), b"-0", b"+5", b"1_000"],
)
def test_odd_lifetime_values_are_bad_input(raw: bytes) -> None:
    for key in (lifetime.EXPIRES_AT, lifetime.LIFETIME_MS, lifetime.ROUTER_EXPIRES_AT):
        batch = Batch("b", 0)
        classify.Classifier(hop_settings(), "send", {}).classify(
            batch, [msg(0, extra=[(key, raw)])]
        )
        (item,) = batch.items
        assert item.bad is not None and item.bad.code == "bad-lifetime", (key, raw)


def test_a_header_given_twice_is_bad_even_with_the_same_value_and_the_stamp_too() -> None:
    for key in (lifetime.EXPIRES_AT, lifetime.ROUTER_EXPIRES_AT, lifetime.ON_EXPIRY):
        value = b"skip" if key == lifetime.ON_EXPIRY else str(T0 + 10**9).encode()
        batch = Batch("b", 0)
        classify.Classifier(hop_settings(), "send", {}).classify(
            batch, [msg(0, "g", seq=0, extra=[(key, value), (key, value)])]
        )
        (item,) = batch.items
        assert item.bad is not None and item.bad.code == "bad-lifetime", key


# ---------------------------------------------------------------- (c) skip, two hops


def test_skip_an_expired_middle_member_the_rest_goes_in_order_on_one_queue() -> None:
    hops = TwoHops()
    hops.run(
        T0 + 100,
        T0 + 100,
        [
            member(0, "g", 0),
            member(1, "g", 1, extra=[*at(T0 + 100), *SKIP]),  # now == instant: expired
            member(2, "g", 2),
            member(3, "g", 3, final=True),
        ],
    )
    assert hops.values() == [b"g0", b"g2", b"g3"]
    assert len({q for q, _ in hops.delivered}) == 1
    (gone,) = hops.expired()
    assert (gone["guarantee_id"], gone["seq"], gone["hop"]) == ("g", 1, "SEND_UNIT")
    assert hops.dead == []
    assert hops.send.model.entries == {} and hops.receive.model.entries == {}  # released


def test_skip_an_expired_first_member_the_rest_of_its_group_is_still_delivered() -> None:
    """FIXED (router/unit/steps/emit/markers.py): the send side skipped member 0 (its entry created
    by the member it did not forward) and the receive side got the group from member 1 on, a
    continuation without an entry: every later member was dead-lettered as group-entry-missing. The
    send side now writes a skip marker in member 0's place, which the receive side routes as that
    member (opening the group) and forwards nowhere. The same holds for a bad first member under the
    dead-letter policy."""
    hops = TwoHops()
    hops.run(
        T0 + 100,
        T0 + 100,
        [
            member(0, "g", 0, extra=[*at(T0 + 50), *SKIP]),
            member(1, "g", 1),
            member(2, "g", 2, final=True),
        ],
    )
    assert [e["seq"] for e in hops.expired()] == [0]
    assert hops.dead == [], [d["reason_code"] for d in hops.dead]
    assert hops.values() == [b"g1", b"g2"]
    assert hops.send.outs[0].skip_markers == 1 and hops.receive.outs[0].skips == 1
    assert hops.send.model.entries == {} and hops.receive.model.entries == {}  # released


def test_a_bad_first_member_under_dead_letter_leaves_the_rest_of_its_group_delivered() -> None:
    hops = TwoHops()
    hops.run(
        T0 + 100,
        T0 + 100,
        [
            member(0, "g", 0, extra=[(lifetime.LIFETIME_MS, b"soon")]),
            member(1, "g", 1),
            member(2, "g", 2, final=True),
        ],
    )
    assert [d["reason_code"] for d in hops.dead] == ["bad-lifetime"]
    assert hops.values() == [b"g1", b"g2"]
    assert len({q for q, _ in hops.delivered}) == 1


def test_skip_an_expired_final_ends_its_group_on_both_sides() -> None:
    hops = TwoHops()
    hops.run(
        T0 + 100,
        T0 + 100,
        [member(0, "g", 0), member(1, "g", 1, final=True, extra=[*at(T0 + 1), *SKIP])],
    )
    assert hops.values() == [b"g0"]
    assert [e["seq"] for e in hops.expired()] == [1]
    assert hops.send.model.entries == {} and hops.send.model.load == {}
    # the close marker released it downstream: nothing held until its TTL
    assert hops.receive.model.entries == {} and hops.receive.model.load == {}
    assert hops.send.outs[0].close_markers == 1 and hops.receive.outs[0].closes == 1
    # and the next group can take that destination at once
    hops.run(T0 + 200, T0 + 200, [member(2, "h", 0, final=True)])
    assert hops.values() == [b"g0", b"h0"]


def test_expire_group_stops_the_group_like_stop_group_on_both_sides() -> None:
    hops = TwoHops()
    hops.run(
        T0 + 100,
        T0 + 100,
        [
            member(0, "g", 0),
            member(1, "g", 1, extra=[*at(T0 + 1), *STOP]),
            member(2, "g", 2),
            member(3, "g", 3, final=True),
        ],
    )
    assert hops.values() == [b"g0"]
    assert [(e["seq"], e["on_expiry"]) for e in hops.expired()] == [(1, "EXPIRE_GROUP")]
    assert [d["reason_code"] for d in hops.dead] == ["group-stopped", "group-stopped"]
    stopped = [e for s, e in hops.events if s == events.GROUP_STOPPED]
    assert [e["reason_code"] for e in stopped] == ["expired"]
    # the destinations are free again on both sides (close marker downstream)
    assert hops.send.model.load == {} and hops.receive.model.load == {}
    out = hops.send.outs[0]
    assert out.consumed == 4


def test_the_expired_metric_counts_a_member_that_stops_its_group() -> None:
    """FIXED (router/unit/steps/emit/emitter.py): an expired member under expire-group (and an
    expired member
    of a group already stopped) is written as an ExpiredMessage event by the park path,
    which counted it as `parked`: the `expired` metric missed it."""
    hops = TwoHops()
    hops.run(
        T0 + 100,
        T0 + 100,
        [
            member(0, "g", 0),
            member(1, "g", 1, extra=[*at(T0 + 1), *STOP]),
            member(2, "g", 2, extra=[*at(T0 + 1), *SKIP]),  # expired, group already stopped
            member(3, "g", 3, final=True),
        ],
    )
    assert len(hops.expired()) == 2
    out = hops.send.outs[0]
    assert (out.forwarded, out.expired, out.parked, out.dead) == (1, 2, 1, 0)
    assert out.consumed == 4 and out.groups_stopped == 1


def test_an_expired_first_member_under_expire_group_stops_a_group_with_no_destination() -> None:
    hops = TwoHops()
    hops.run(
        T0 + 100,
        T0 + 100,
        [
            member(0, "g", 0, extra=[*at(T0 + 1), *STOP]),
            member(1, "g", 1),
            member(2, "g", 2, final=True),
            msg(3, None, value=b"plain"),
        ],
    )
    assert hops.values() == [b"plain"]
    assert [e["seq"] for e in hops.expired()] == [0]
    assert [d["reason_code"] for d in hops.dead] == ["group-stopped", "group-stopped"]
    assert hops.send.model.load == {} and hops.receive.model.entries == {}


def test_the_receive_unit_expires_by_the_stamp_and_a_close_marker_never_expires() -> None:
    """The send unit forwards a member alive (stamped), its lifetime ends on the transfer
    topic, its final (no lifetime) expired on the send side: the receive unit skips the
    member and still honours the close marker; the receive side's event names its hop."""
    hops = TwoHops()
    hops.run(
        T0 + 100,
        T0 + 10_000,
        [
            member(0, "g", 0, extra=[(lifetime.LIFETIME_MS, b"5000")]),
            member(1, "g", 1),
            member(2, "g", 2, final=True, extra=at(T0 + 50)),
        ],
    )
    assert hops.values() == [b"g1"]
    assert sorted((e["seq"], e["hop"]) for e in hops.expired()) == [
        (0, "RECEIVE_UNIT"),
        (2, "SEND_UNIT"),
    ]
    assert hops.receive.model.entries == {} and hops.receive.model.load == {}
    assert hops.dead == []


def test_a_forged_stamp_on_a_send_queue_can_only_shorten_a_lifetime() -> None:
    """A producer's own `router-expires-at` counts like `message-expires-at` (the earlier
    instant wins) and is replaced by the send unit's stamp: never two stamps downstream."""
    hops = TwoHops()
    late, early = str(T0 + 10**9).encode(), str(T0 + 10**6).encode()
    hops.run(
        T0,
        T0 + 2 * 10**6,
        [msg(0, value=b"a", extra=[(lifetime.ROUTER_EXPIRES_AT, late), *at(T0 + 10**6)])],
    )
    assert hops.values() == [] and len(hops.expired()) == 1  # judged by the earlier instant
    out = hops.send.outs[0]
    (record,) = [r for r in out.records if r.topic == "t.transfer"]
    stamps = [v for k, v in record.headers if k == lifetime.ROUTER_EXPIRES_AT]
    assert stamps == [early]


# ---------------------------------------------------------------- the waiting room


class Room(Side):
    """The room harness with the classify step's clock set to the harness's time, and
    the ExpiredMessage events kept."""

    def route(self, now: int, *messages: FakeMessage, commit: bool = True) -> list[str]:
        real = classify.time
        classify.time = _Clock(now)  # type: ignore[assignment]
        try:
            return super().route(now, *messages, commit=commit)
        finally:
            classify.time = real

    def expired(self) -> list[dict[str, Any]]:
        return [e for s, e in self.events if s == events.EXPIRED_MESSAGE]

    def values(self) -> list[bytes | None]:
        return [v for _, v in self.delivered]


class _Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def time(self) -> float:
        return self.now_ms / 1000


def test_clock_patch_is_seen_by_the_classify_step() -> None:
    s = Room(["0"])
    s.route(T0 + 5, msg(0, value=b"x", extra=at(T0 + 5)))
    s.route(T0 + 5, msg(1, value=b"y", extra=at(T0 + 6)))
    assert len(s.expired()) == 1 and s.values() == [b"y"]


def test_a_whole_groups_final_expiring_in_the_room_still_ends_the_group() -> None:
    s = Room(["0"])
    s.route(T0, whole(0, "W", 0), whole(1, "W", 1))
    s.route(T0 + 10, whole(2, "W", 2, final=True, extra=at(T0 + 50)))
    assert s.values() == [] and s.expired() == []  # staged, alive when routed
    out = s.run_drain(T0 + 50)  # now == its instant
    assert s.values() == [b"W0", b"W1"]
    (gone,) = s.expired()
    assert (gone["guarantee_id"], gone["seq"], gone["final"]) == ("W", 2, True)
    assert out.close_markers == 1 and out.expired == 1
    assert s.model.entries == {} and s.model.load == {} and s.model.room == {}
    assert len(s.transactions) == 1  # still one write


def test_a_member_expired_when_parked_has_its_seq_and_outcome_in_its_event() -> None:
    """FIXED (router/unit/steps/drain/index.py): a member already expired when the route step parks
    it in the room (its group waits) is parked with its reason; the drain's ExpiredMessage event
    then lost its `seq` (the reason read back from `router-bad` kept the group and final flag only)
    and its `on_expiry`: the gap in the group was not visible."""
    s = Room(["0"])
    s.route(T0, msg(0, "A", seq=0, value=b"A0"))  # A holds the only destination
    s.route(
        T0 + 10,
        msg(1, "G", seq=0, value=b"G0"),
        msg(2, "G", seq=1, value=b"G1", extra=[*at(T0 + 5), *SKIP]),
        msg(3, "G", seq=2, value=b"G2", final=True),
    )
    assert s.expired() == []  # parked in its place, reported when drained
    s.route(T0 + 20, msg(4, "A", seq=1, final=True, value=b"A1"))
    s.run_drain(T0 + 30)
    assert s.values() == [b"A0", b"A1", b"G0", b"G2"]
    (gone,) = s.expired()
    assert (gone["guarantee_id"], gone["seq"], gone["on_expiry"]) == ("G", 1, "SKIP")
    assert gone["source_offset"] == 2 and gone["expires_at"] is not None
    assert s.model.entries == {} and s.dead == []


def test_an_expired_first_member_of_a_waiting_group_the_rest_is_drained_in_order() -> None:
    s = Room(["0"])
    s.route(T0, msg(0, "A", seq=0, value=b"A0"))
    s.route(
        T0 + 10,
        msg(1, "G", seq=0, value=b"G0", extra=[*at(T0 + 5), *SKIP]),
        msg(2, "G", seq=1, value=b"G1", extra=at(T0 + 40)),  # expires in the room
        msg(3, "G", seq=2, value=b"G2"),
        msg(4, None, value=b"o1", extra=at(T0 + 40)),  # ordinary, parked, expires too
        msg(5, "G", seq=3, value=b"G3", final=True),
    )
    s.route(T0 + 20, msg(6, "A", seq=1, final=True, value=b"A1"))
    for k in range(3):
        s.run_drain(T0 + 50 + k)
    assert s.values() == [b"A0", b"A1", b"G2", b"G3"]
    assert sorted((e["guarantee_id"] or "", e["seq"]) for e in s.expired()) == [
        ("", None),
        ("G", 0),
        ("G", 1),
    ]
    assert s.dead == [] and "G" not in s.model.entries and s.model.room == {}


def test_an_aborted_drain_never_reports_an_expired_member_twice_nor_zero_times() -> None:
    s = Room(["0"])
    s.route(T0, whole(0, "W", 0, extra=at(T0 + 40)), whole(1, "W", 1))
    s.route(T0 + 10, whole(2, "W", 2, final=True))
    s.drain_batch(T0 + 50, commit=False)  # expired when drained, but the batch aborts
    assert s.expired() == [] and s.values() == []
    s.run_drain(T0 + 60)
    s.run_drain(T0 + 70)
    assert [e["seq"] for e in s.expired()] == [0]
    assert s.values() == [b"W1", b"W2"]
    assert s.model.entries == {}


def test_a_member_alive_at_an_aborted_drain_and_expired_at_its_replay_is_not_forwarded() -> None:
    s = Room(["0"])
    s.route(T0, whole(0, "W", 0), whole(1, "W", 1, extra=at(T0 + 55)))
    s.route(T0 + 10, whole(2, "W", 2, final=True))
    s.drain_batch(T0 + 50, commit=False)  # W1 alive, forwarded in a batch that aborts
    assert s.values() == []
    s.run_drain(T0 + 60)
    assert s.values() == [b"W0", b"W2"] and [e["seq"] for e in s.expired()] == [1]


def test_expire_group_on_a_member_of_a_waiting_group_stops_it_and_empties_the_room() -> None:
    s = Room(["0"])
    s.route(T0, msg(0, "A", seq=0, value=b"A0"))
    s.route(
        T0 + 10,
        msg(1, "G", seq=0, value=b"G0"),
        msg(2, "G", seq=1, value=b"G1", extra=[*at(T0 + 5), *STOP]),
        msg(3, "G", seq=2, value=b"G2", final=True),
    )
    s.route(T0 + 20, msg(4, "A", seq=1, final=True, value=b"A1"))
    for k in range(3):
        s.run_drain(T0 + 30 + k)
    assert s.values() == [b"A0", b"A1"]
    assert [e["seq"] for e in s.expired()] == [1]
    assert sorted(r for _, r in s.dead) == [b"group-stopped", b"group-stopped"]  # G0, G2
    assert s.model.load == {} and s.model.room == {}


LOGICAL: Headers = [(contract.ORDER, b"logical")]


def logical(offset: int, seq: int, partition: int, final: bool = False, extra: Headers = ()) -> Any:  # type: ignore[assignment]
    return msg(
        offset,
        "G",
        seq=seq,
        final=final,
        partition=partition,
        value=f"G{seq}@{partition}".encode(),
        extra=[*LOGICAL, *extra],
    )


def test_logical_order_an_expired_member_fills_its_number_and_a_late_copy_is_expired() -> None:
    """An expired member of a logical group is routed dead with its number, so the drain's
    sequence runs on past it (no gap); a retry copy below the next number, expired too, has
    one ExpiredMessage event, counted as expired. FIXED (router/unit/steps/drain/logical.py): the
    drain counted expired duplicates and unsequenced members as dead letters."""
    s = Room(["0"])
    s.route(T0, logical(0, 0, 0), logical(1, 1, 0))  # straight
    s.route(T0 + 10, logical(0, 3, 1))  # out of sequence: the group goes back to the room
    s.route(T0 + 20, logical(1, 2, 1, extra=at(T0 + 15)))  # expired: fills number 2
    s.route(T0 + 30, logical(2, 0, 1, extra=at(T0 + 15)))  # a late copy of 0, expired
    outs = [s.run_drain(T0 + 40 + k) for k in range(3)]
    assert s.values() == [b"G0@0", b"G1@0", b"G3@1"]
    assert sorted(e["seq"] for e in s.expired()) == [0, 2]
    assert s.dead == []
    assert sum(o.expired for o in outs) == 2 and sum(o.dead for o in outs) == 0


def test_an_expired_ordinary_message_takes_no_destination() -> None:
    """FIXED (router/unit/steps/route.py): an expired ordinary message (readable routing headers, no
    group) was still routed: the table leased it a destination for its batch, which the
    emitter never settles (it forwards nothing there), so the destination stayed fenced
    for new groups until the lease ran out (transaction timeout + 5 s); with one
    destination under `hold`, the next group's lane was held all that time. Any bad
    ordinary message did the same; expiry makes it common."""
    s = RouterSettings(
        topology={"name": "t", "receive_units": 1},  # type: ignore[arg-type]
        routing={"busy_policy": "hold"},  # type: ignore[arg-type]
    )
    hop = Hop("send", s)
    out = hop.run(T0, [msg(0, value=b"o", extra=at(T0 - 1))])
    assert out.expired == 1 and hop.model.inflight == {}
    out = hop.run(T0 + 10, [member(1, "g", 0)])
    assert out.forwarded == 1, "the new group waits for the expired message's lease"
