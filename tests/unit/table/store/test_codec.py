"""The entry codec and the route script's flags (`router.table.store.codec`), without servers:
lane order's last routed sequence number (`Entry.routed`, flag 'q<n>') next to every
entry form earlier versions wrote, and the route step's requests that carry it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from router import contract
from router.config import RoutingSettings
from router.table.routing import Entry, RouteRequest
from router.table.store.codec import decode_entry, encode
from router.unit.steps.batch import Item
from router.unit.steps.route import request_for
from tests.fixtures.fakes import msg

BASE = "2|1000|3000|60000|"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # before lanes
        (BASE, Entry("2", 1000, 3000, 60000)),
        # lane order, open
        (BASE + "|q/0", Entry("2", 1000, 3000, 60000, "", "q/0")),
        # in the waiting room
        (BASE + "|q/0|waiting|3", Entry("2", 1000, 3000, 60000, "", "q/0", "waiting", 3)),
        # logical order before origins
        (
            BASE + "|q/0|open|0|5|q/0/9",
            Entry("2", 1000, 3000, 60000, "", "q/0", next=5, fence="q/0/9"),
        ),
        # logical order
        (
            BASE + "q/0/12|q/0|open|0|5|q/0/9|q/0/1",
            Entry("2", 1000, 3000, 60000, "q/0/12", "q/0", next=5, fence="q/0/9", origin="q/0/1"),
        ),
    ],
)
def test_every_earlier_entry_form_decodes_without_a_routed_number(
    raw: str, expected: Entry
) -> None:
    e = decode_entry(raw)
    assert e == expected and e.routed is None
    assert decode_entry(raw.encode("utf-8")) == expected


def test_a_lane_order_entry_with_a_routed_number_decodes_it() -> None:
    e = decode_entry(BASE + "|q/0|open|0|-1|||17")
    assert (e.lane, e.state, e.parks, e.next, e.fence, e.origin) == ("q/0", "open", 0, -1, "", "")
    assert e.routed == 17
    assert decode_entry(BASE + "q/0/40|q/0|open|0|-1|||0").routed == 0  # 0 is a number
    assert decode_entry(BASE + "q/0/40|q/0|open|0|-1|||0").closing == "q/0/40"
    # an empty trailing field is no number
    assert decode_entry(BASE + "|q/0|open|0|-1|||").routed is None


def test_a_logical_entry_with_a_routed_number_keeps_its_origin() -> None:
    e = decode_entry(BASE + "|q/0|admitted|2|5|q/0/9|q/0/1|4")
    assert (e.state, e.parks, e.next, e.fence, e.origin, e.routed) == (
        "admitted",
        2,
        5,
        "q/0/9",
        "q/0/1",
        4,
    )


def req(**kw: object) -> RouteRequest:
    return replace(RouteRequest("G", False, 60_000, "", "q/0"), **kw)  # type: ignore[arg-type]


def test_a_request_is_its_id_its_kind_and_its_position() -> None:
    # the kind ("flags|TTL|lane") repeats from message to message; the position is the
    # message's own: lane order's number, then its token
    assert encode(req(token="q/0/5")) == ("G", "|60000|q/0", "=q/0/5")
    assert encode(req(lane_seq=7, token="q/0/5")) == ("G", "|60000|q/0", "7=q/0/5")
    assert encode(req(lane_seq=0))[2] == "0="
    assert encode(req(final=True, continuation=True, lane_seq=12))[1:] == ("fc|60000|q/0", "12=")
    assert encode(req(guarantee_id=None, lane="a|b", token="x=y"))[:3] == ("", "|60000|a|b", "=x=y")
    # logical order's `l` already carries the number: no second one; nor an unreadable one
    assert encode(req(seq=3, lane_seq=3))[1:] == ("l3|60000|q/0", "=")
    assert encode(req(seq=-1))[1] == "l-1|60000|q/0"
    assert encode(req(lane_seq=-2))[2] == "="
    # multicast: an ordinary message whose token is its target queues
    assert encode(req(targets=("a", "b"))) == ("", "m|60000|q/0", "=a,b")


RULES = RoutingSettings()


def item(offset: int, gid: str | None, **headers: object) -> Item:
    m = msg(offset, gid, **headers)  # type: ignore[arg-type]
    return Item(m, m.headers(), contract.parse(m.headers(), RULES))


def test_the_route_step_gives_lane_order_members_their_number_only() -> None:
    lane = "in/0"
    assert request_for(item(4, "G", seq=2), RULES, lane, False).lane_seq == 2
    assert request_for(item(5, "G"), RULES, lane, False).lane_seq is None  # no number
    assert request_for(item(6, None), RULES, lane, False).lane_seq is None  # ordinary
    # logical order on the send side: the number is `seq`, not recorded twice
    logical = request_for(
        item(7, "G", seq=3, extra=[(contract.ORDER, b"logical")]), RULES, lane, False, True
    )
    assert (logical.seq, logical.lane_seq) == (3, None)
    # on the receive side a logical group keeps the one-lane rule: its number is recorded
    received = request_for(
        item(8, "G", seq=3, extra=[(contract.ORDER, b"logical")]), RULES, lane, False
    )
    assert (received.seq, received.lane_seq) == (None, 3)


def test_the_route_step_fills_every_field_of_a_request_by_its_name() -> None:
    # request_for builds its requests positionally (for speed): each field, by name
    lane = "in/0"
    good = item(4, "G", seq=2, final=True, extra=[(contract.DELIVERY, b"complete")])
    assert request_for(good, RULES, lane, False) == RouteRequest(
        guarantee_id="G",
        final=True,
        ttl_ms=RULES.default_ttl_ms,
        token="in/0/4",
        lane=lane,
        continuation=True,
        complete=True,
        lane_seq=2,
    )
    forced = request_for(item(0, "G", seq=0), RULES, lane, True)
    assert (forced.force_share, forced.continuation, forced.lane_seq) == (True, False, 0)
    bad = item(5, "G", seq=3)
    bad.routing, bad.bad = None, contract.BadInput("undecodable-payload", "not avro")
    bad.bad.guarantee_id, bad.bad.seq = "G", 3
    dead = request_for(bad, RULES, lane, False)
    assert (dead.dead, dead.poison_stop, dead.ttl_ms) == (True, False, RULES.default_ttl_ms)
    bad.stop = True
    stopping = request_for(bad, RULES, lane, False)
    assert (stopping.dead, stopping.poison_stop) == (False, True)
    logical = request_for(
        item(7, "G", seq=3, extra=[(contract.ORDER, b"logical")]), RULES, lane, False, True
    )
    assert (logical.seq, logical.targets, logical.close) == (3, (), False)
