"""What `Sender.send` makes of a caller's own routing headers, and the numbers it gives a
group (pure): every routing header once, a caller's `guarantee-seq` checked against the
group's next number, and a clear ValueError instead of a dead letter."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router import contract
from router.config import RoutingSettings
from router.contract.request import Request, request, routing_headers
from router.sender.groups import OpenGroups

RULES = RoutingSettings()


def req(headers: list[tuple[str, Any]] = (), **kwargs: Any) -> Request:  # type: ignore[assignment]
    args: dict[str, Any] = {
        "guarantee_id": None,
        "final": False,
        "message_type": None,
        "ttl_ms": None,
        "delivery": None,
        **kwargs,
    }
    return request(headers, **args)


def lanes(tp: tuple[str, int] = ("q", 0)) -> Any:
    calls: list[tuple[str, int]] = []

    def pick() -> tuple[str, int]:
        calls.append(tp)
        return tp

    pick.calls = calls  # type: ignore[attr-defined]
    return pick


def test_a_callers_own_seq_header_is_sent_once_and_parses_as_the_router_reads_it() -> None:
    groups = OpenGroups(300)
    pick = lanes()
    sent = []
    for i in range(3):
        r = req(
            [("guarantee-seq", str(i).encode()), ("app", b"x")],
            guarantee_id="g",
            final=i == 2,
        )
        tp, seq = groups.place(r, 0.0, pick)
        headers = [
            *routing_headers(r, seq),
            *[(k, v) for k, v in r.others if not isinstance(v, str)],
        ]
        assert [k for k, _ in headers].count(contract.SEQ) == 1
        parsed = contract.parse(headers, RULES)  # no duplicate-header: routed, not dead-lettered
        sent.append((tp, parsed.seq, parsed.final))
        assert ("app", b"x") in headers
    assert sent == [(("q", 0), 0, False), (("q", 0), 1, False), (("q", 0), 2, True)]
    assert pick.calls == [("q", 0)] and groups.lanes() == {}


def test_routing_headers_may_come_in_headers_instead_of_arguments() -> None:
    r = req(
        [
            ("guarantee-id", "order-7"),  # str values too, as confluent-kafka takes them
            ("guarantee-final", b"true"),
            ("message-type", b"order"),
            ("guarantee-ttl-ms", b"60000"),
            ("guarantee-delivery", b"complete"),
            ("guarantee-on-poison", b"stop-group"),
            ("guarantee-order", b"logical"),
        ]
    )
    assert (r.guarantee_id, r.final, r.message_type, r.ttl_ms) == ("order-7", True, "order", 60000)
    assert (r.delivery, r.on_poison, r.order, r.logical) == (
        "complete",
        "stop-group",
        "logical",
        True,
    )
    names = [k for k, _ in routing_headers(r, 0)]
    assert sorted(names) == sorted(contract.ROUTING_HEADERS)
    # The same value as an argument and in headers is no conflict.
    same = req(
        [("guarantee-id", b"g"), ("guarantee-ttl-ms", b"5000")], guarantee_id="g", ttl_ms=5000
    )
    assert (same.guarantee_id, same.ttl_ms) == ("g", 5000)


@pytest.mark.parametrize(
    ("headers", "kwargs", "match"),
    [
        (
            [("guarantee-seq", b"1"), ("guarantee-seq", b"2")],
            {"guarantee_id": "g"},
            "more than once",
        ),
        ([("guarantee-seq", b"x1")], {"guarantee_id": "g"}, "non-negative integer"),
        ([("guarantee-seq", b"-1")], {"guarantee_id": "g"}, "non-negative integer"),
        ([("guarantee-seq", b"0")], {}, "without a guarantee ID"),
        ([("guarantee-id", b"a")], {"guarantee_id": "b"}, "different values"),
        ([("guarantee-final", b"false")], {"guarantee_id": "g", "final": True}, "final"),
        ([("guarantee-final", b"maybe")], {"guarantee_id": "g"}, "true or false"),
        ([("guarantee-final", b"true")], {}, "cannot be final"),
        ([("guarantee-ttl-ms", b"100")], {"guarantee_id": "g", "ttl_ms": 200}, "different"),
        ([("guarantee-delivery", b"all")], {"guarantee_id": "g"}, "one of"),
        ([("guarantee-order", b"random")], {"guarantee_id": "g"}, "one of"),
        ([("guarantee-on-poison", b"ignore")], {"guarantee_id": "g"}, "one of"),
        ([("guarantee-id", b"\xff")], {}, "UTF-8"),
    ],
)
def test_a_routing_header_the_router_would_dead_letter_is_a_value_error(
    headers: list[tuple[str, bytes]], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        req(headers, **kwargs)


def test_in_lane_order_a_callers_seq_must_be_the_groups_next_number() -> None:
    groups = OpenGroups(300)
    pick = lanes()
    with pytest.raises(ValueError, match="is not open in this sender: its next number is 0"):
        groups.place(req([("guarantee-seq", b"3")], guarantee_id="g"), 0.0, pick)
    assert pick.calls == [] and groups.lanes() == {}  # nothing chosen, nothing opened
    assert groups.place(req([("guarantee-seq", b"0")], guarantee_id="g"), 0.0, pick)[1] == 0
    assert groups.place(req(guarantee_id="g"), 0.0, pick)[1] == 1  # numbered by the sender
    for wrong in (b"1", b"3"):  # a repeat, a gap
        with pytest.raises(ValueError, match="which is open: its next number is 2"):
            groups.place(req([("guarantee-seq", wrong)], guarantee_id="g"), 0.0, pick)
    assert (
        groups.place(req([("guarantee-seq", b"2")], guarantee_id="g", final=True), 0.0, pick)[1]
        == 2
    )
    assert groups.lanes() == {}
    # After its final, the ID starts a new group at 0.
    assert groups.place(req([("guarantee-seq", b"0")], guarantee_id="g"), 0.0, pick)[1] == 0


def test_in_logical_order_any_number_not_yet_sent_is_taken() -> None:
    groups = OpenGroups(300)
    pick = lanes()
    logical = [("guarantee-order", b"logical")]
    got = []
    for n in (5, 0, 2):  # this sender sends part of a group, out of order
        r = req([*logical, ("guarantee-seq", str(n).encode())], guarantee_id="g")
        got.append(groups.place(r, 0.0, pick)[1])
    assert got == [5, 0, 2]
    with pytest.raises(ValueError, match="already sent"):
        groups.place(req([*logical, ("guarantee-seq", b"2")], guarantee_id="g"), 0.0, pick)
    # Unnumbered, it continues after the highest number sent.
    assert groups.place(req(logical, guarantee_id="g"), 0.0, pick)[1] == 6
    # routing.default_order = "logical" makes it so without the header.
    r = request(
        [("guarantee-seq", b"4")],
        guarantee_id="h",
        final=False,
        message_type=None,
        ttl_ms=None,
        delivery=None,
        default_order="logical",
    )
    assert r.logical and groups.place(r, 0.0, pick)[1] == 4


def test_idle_groups_are_forgotten_past_the_limit() -> None:
    groups = OpenGroups(max_idle_s=10, limit=2)
    pick = lanes()
    for i, g in enumerate("abc"):
        groups.place(req(guarantee_id=g), float(i), pick)
    assert set(groups.lanes()) == {"a", "b", "c"}  # none idle for 10 s yet
    groups.place(req(guarantee_id="d"), 11.5, pick)
    assert set(groups.lanes()) == {"c", "d"}  # a and b idle longer than 10 s


@given(st.lists(st.sampled_from("abc"), max_size=40), st.randoms(use_true_random=False))
def test_each_group_is_numbered_0_1_2_on_one_lane_whether_the_caller_numbers_it_or_not(
    ids: list[str], rng: Any
) -> None:
    groups = OpenGroups(300)
    expected: dict[str, int] = {}
    lane_of: dict[str, tuple[str, int]] = {}
    for i, g in enumerate(ids):
        n = expected.get(g, 0)
        headers = [("guarantee-seq", str(n).encode())] if rng.random() < 0.5 else []
        tp, seq = groups.place(req(headers, guarantee_id=g), float(i), lanes(("q", i % 3)))
        assert seq == n and lane_of.setdefault(g, tp) == tp
        expected[g] = n + 1


def test_a_routing_header_the_sender_does_not_read_is_passed_on_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A routing header added to the contract later still reaches the router."""
    monkeypatch.setattr(contract, "ROUTING_HEADERS", contract.ROUTING_HEADERS | {"guarantee-new"})
    r = req([("guarantee-new", b"x"), ("app", b"y")], guarantee_id="g")
    assert r.others == [("guarantee-new", b"x"), ("app", b"y")]
    with pytest.raises(ValueError, match="more than once"):
        req([("guarantee-new", b"x"), ("guarantee-new", b"x")], guarantee_id="g")
