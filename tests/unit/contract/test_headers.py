"""Routing headers: what the router accepts, and the exact reason for what it refuses."""

from __future__ import annotations

import pytest

from router.config import RoutingSettings
from router.contract import FINAL, GUARANTEE_ID, TTL_MS, BadInput, Routing, headers_for, parse
from router.errors import InvalidRequest

RULES = RoutingSettings(ttl_by_type={"split-file": 60_000, "slips": 3_600_000})


def test_no_headers_is_an_ordinary_message() -> None:
    assert parse(None, RULES) == Routing(None, False, RULES.default_ttl_ms)
    assert parse([("trace-id", b"abc")], RULES) == Routing(None, False, RULES.default_ttl_ms)


def test_grouped_message_with_every_header() -> None:
    headers = [
        ("guarantee-id", "Bestellung-ü".encode()),
        ("guarantee-final", b"true"),
        ("guarantee-seq", b"7"),
        ("message-type", b"slips"),
        ("other", None),
    ]
    assert parse(headers, RULES) == Routing("Bestellung-ü", True, 3_600_000, 7, "slips")


def test_ttl_header_overrides_the_type_within_bounds() -> None:
    r = parse([("guarantee-id", b"g"), ("guarantee-ttl-ms", b"5000")], RULES)
    assert r.ttl_ms == 5000


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ([("guarantee-id", b"\xff\xfe")], "bad-guarantee-id"),
        ([("guarantee-id", b"x" * 257)], "bad-guarantee-id"),
        # the waiting room's pseudo-groups: a lane's ordinary messages, a queue's copies
        ([("guarantee-id", b"~send/0")], "bad-guarantee-id"),
        ([("guarantee-id", b"~*recv-0")], "bad-guarantee-id"),
        ([("guarantee-id", b"g"), ("guarantee-final", b"yes")], "bad-final-flag"),
        ([("guarantee-final", b"true")], "final-without-guarantee-id"),
        ([("guarantee-id", b"g"), ("message-type", b"unknown")], "unknown-message-type"),
        ([("guarantee-id", b"g"), ("guarantee-ttl-ms", b"1")], "bad-ttl"),
        ([("guarantee-id", b"g"), ("guarantee-ttl-ms", b"-5")], "bad-ttl"),
        ([("guarantee-id", b"g"), ("guarantee-seq", b"1.5")], "bad-seq"),
        ([("guarantee-id", b"a"), ("guarantee-id", b"b")], "duplicate-header"),
    ],
)
def test_malformed_headers_name_their_reason(headers: list[tuple[str, bytes]], code: str) -> None:
    with pytest.raises(BadInput) as raised:
        parse(headers, RULES)
    assert raised.value.code == code
    assert raised.value.detail


def test_headers_for_round_trips_through_parse() -> None:
    h = headers_for("order-1", final=True, seq=3, message_type="split-file", ttl_ms=2000)
    assert parse(h, RULES) == Routing("order-1", True, 2000, 3, "split-file")
    assert parse(headers_for(None), RULES) == Routing(None, False, RULES.default_ttl_ms)
    with pytest.raises(ValueError, match="cannot be final"):
        headers_for(None, final=True)


def test_a_malformed_final_keeps_its_group_and_its_final_flag() -> None:
    """A bad final still ends its group (its destination is freed, the receive side is
    sent a close marker): the error says it was a final, when the flag is readable."""
    headers = [*headers_for("g", seq=3, final=True), (TTL_MS, b"5")]
    with pytest.raises(BadInput) as bad:
        parse(headers, RULES)
    assert (bad.value.code, bad.value.guarantee_id, bad.value.final) == ("bad-ttl", "g", True)
    with pytest.raises(BadInput) as bad:
        parse([(GUARANTEE_ID, b"g"), (FINAL, b"maybe")], RULES)
    assert bad.value.code == "bad-final-flag" and not bad.value.final


def test_whole_group_delivery_by_header_by_type_or_by_default() -> None:
    asked = [("guarantee-id", b"g"), ("guarantee-delivery", b"complete")]
    assert parse(asked, RULES).complete
    assert not parse([("guarantee-id", b"g"), ("guarantee-delivery", b"stream")], RULES).complete
    assert not parse([("guarantee-id", b"g")], RULES).complete  # default: stream
    rules = RoutingSettings(
        busy_policy="wait",
        ttl_by_type={"slips": 60_000, "log": 60_000},
        delivery_by_type={"slips": "complete"},
    )
    assert parse([("guarantee-id", b"g"), ("message-type", b"slips")], rules).complete
    assert not parse([("guarantee-id", b"g"), ("message-type", b"log")], rules).complete
    everything = RoutingSettings(busy_policy="wait", default_delivery="complete")
    assert parse([("guarantee-id", b"g")], everything).complete
    assert not parse([("trace", b"x")], everything).complete  # an ordinary message
    with pytest.raises(BadInput) as bad:
        parse([("guarantee-id", b"g"), ("guarantee-delivery", b"all")], RULES)
    assert bad.value.code == "bad-delivery" and bad.value.guarantee_id == "g"
    assert headers_for("g", delivery="complete")[-1] == ("guarantee-delivery", b"complete")


def test_complete_delivery_needs_the_waiting_room_and_known_types() -> None:
    assert RoutingSettings(default_delivery="complete").busy_policy == "wait"  # the default
    for policy in ("share", "hold"):
        with pytest.raises(ValueError, match="busy_policy"):
            RoutingSettings(busy_policy=policy, default_delivery="complete")
    with pytest.raises(ValueError, match="not in ttl_by_type"):
        RoutingSettings(busy_policy="wait", delivery_by_type={"nope": "complete"})


def test_a_sender_cannot_name_a_group_as_the_waiting_room_names_its_own() -> None:
    with pytest.raises(InvalidRequest, match="reserves for its waiting room"):
        headers_for("~send/0")
    assert headers_for("a~b") == [("guarantee-id", b"a~b")]
