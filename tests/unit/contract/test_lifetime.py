"""Per-message lifetime (router.contract.lifetime) and the steps that apply it: the classify step
marks an expired message, the emit step writes its ExpiredMessage event instead of
forwarding it and stamps `router-expires-at` on what it forwards. No broker."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from router import contract
from router.config import RouterSettings
from router.contract import BadInput, events, lifetime, schemas
from router.topology.side import side_spec
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.emit.emitter import Emitter
from tests.fixtures.fakes import FakeMessage, msg

T0 = 1_700_000_000_000  # the fake messages' CreateTime
BOUNDS = {"min_lifetime_ms": 10, "max_lifetime_ms": 60_000, "default_on_expiry": "skip"}
SETTINGS = RouterSettings(
    topology={"name": "t"},  # type: ignore[arg-type]
    routing={"min_lifetime_ms": 10, "max_lifetime_ms": 60_000},  # type: ignore[arg-type]
)


def read(*headers: tuple[str, bytes | None], ts: int | None = T0) -> lifetime.Lifetime | None:
    return lifetime.read(list(headers), ts, **BOUNDS)  # type: ignore[arg-type]


def test_the_earlier_of_an_absolute_instant_and_a_relative_lifetime_wins() -> None:
    assert read() is None and read((contract.GUARANTEE_ID, b"g")) is None
    assert read((lifetime.LIFETIME_MS, b"500")) == lifetime.Lifetime(T0 + 500, "skip")
    assert read((lifetime.EXPIRES_AT, str(T0 + 200).encode())) == lifetime.Lifetime(
        T0 + 200, "skip"
    )
    both = read((lifetime.LIFETIME_MS, b"500"), (lifetime.EXPIRES_AT, str(T0 + 200).encode()))
    assert both is not None and both.expires_ms == T0 + 200
    # the send unit's stamp counts too: a later hop never extends a lifetime
    stamped = read((lifetime.LIFETIME_MS, b"500"), (lifetime.ROUTER_EXPIRES_AT, b"1700000000100"))
    assert stamped is not None and stamped.expires_ms == T0 + 100
    group = read((lifetime.LIFETIME_MS, b"500"), (lifetime.ON_EXPIRY, b"expire-group"))
    assert group is not None and group.on_expiry == "expire-group"
    assert read((lifetime.ON_EXPIRY, b"skip")) is None  # an outcome alone expires nothing


@pytest.mark.parametrize(
    ("headers", "ts", "says"),
    [
        ([(lifetime.LIFETIME_MS, b"9")], T0, r"outside \[10, 60000\]"),
        ([(lifetime.LIFETIME_MS, b"60001")], T0, "outside"),
        ([(lifetime.LIFETIME_MS, b"-5")], T0, "not a whole number"),
        ([(lifetime.LIFETIME_MS, b"1.5")], T0, "not a whole number"),
        ([(lifetime.LIFETIME_MS, None)], T0, "not a whole number"),
        ([(lifetime.LIFETIME_MS, b"500")], None, "without a timestamp"),
        ([(lifetime.EXPIRES_AT, b"0")], T0, "not an instant"),
        ([(lifetime.EXPIRES_AT, b"99999999999999999")], T0, "not an instant"),
        ([(lifetime.LIFETIME_MS, b"50"), (lifetime.LIFETIME_MS, b"50")], T0, "more than once"),
        ([(lifetime.LIFETIME_MS, b"50"), (lifetime.ON_EXPIRY, b"drop")], T0, "is not one of"),
    ],
)
def test_a_malformed_lifetime_is_bad_input(
    headers: list[tuple[str, bytes | None]], ts: int | None, says: str
) -> None:
    with pytest.raises(BadInput, match=says) as caught:
        read(*headers, ts=ts)
    assert caught.value.code == "bad-lifetime"


def test_a_message_expires_at_its_instant_not_before() -> None:
    life = lifetime.Lifetime(T0 + 100, "skip")
    assert lifetime.expired_input(life, T0 + 99, "send unit") is None
    gone = lifetime.expired_input(life, T0 + 100, "send unit")
    assert gone is not None and gone.code == lifetime.EXPIRED and "send unit" in gone.detail


def classified(*messages: FakeMessage, now_ms: int, side: str = "send") -> Batch:
    batch = Batch("u:1", 0)
    classifier = Classifier(SETTINGS, side, {})  # type: ignore[arg-type]
    classifier.clock_ms = lambda: now_ms
    classifier.classify(batch, list(messages))
    return batch


LIVE = [(lifetime.LIFETIME_MS, b"1000")]


def test_classify_marks_the_expired_with_their_groups_outcome_and_keeps_the_live() -> None:
    batch = classified(
        msg(1, None, extra=LIVE),
        msg(2, None, extra=[(lifetime.LIFETIME_MS, b"10")]),
        msg(3, "g", seq=0, extra=[(lifetime.LIFETIME_MS, b"10")]),
        msg(
            4,
            "h",
            seq=0,
            extra=[(lifetime.LIFETIME_MS, b"10"), (lifetime.ON_EXPIRY, b"expire-group")],
        ),
        msg(5, "k", extra=[(lifetime.LIFETIME_MS, b"3")]),
        now_ms=T0 + 500,
    )
    live, ordinary, skipped, stopping, malformed = batch.items
    assert live.bad is None and live.expires_ms == T0 + 1000
    assert ordinary.bad is not None and ordinary.bad.code == "expired"
    assert ordinary.bad.guarantee_id is None and not ordinary.stop
    assert skipped.bad is not None and skipped.bad.code == "expired" and not skipped.stop
    assert skipped.bad.guarantee_id == "g" and skipped.bad.seq == 0
    assert skipped.bad.on_expiry == "skip" and skipped.bad.expires_ms == T0 + 10
    assert stopping.bad is not None and stopping.stop  # expire-group: the stop-group path
    assert malformed.bad is not None and malformed.bad.code == "bad-lifetime"
    assert malformed.bad.guarantee_id == "k"  # its group's poison policy applies


def test_emit_writes_an_expired_message_event_and_stamps_what_it_forwards() -> None:
    batch = classified(
        msg(1, None, extra=LIVE),
        msg(2, "g", seq=0, extra=[(lifetime.LIFETIME_MS, b"10")], value=b"12345"),
        now_ms=T0 + 500,
    )
    batch.items[0].decision, batch.items[1].decision = "0", "1"
    out = Emitter(SETTINGS, side_spec(SETTINGS, "send"), "unit-1").emit(batch, T0 + 501)
    forwarded, event, skip = out.records
    # the group goes on without its member 0: the receive side routes a skip marker in its
    # place (router.unit.steps.emit.markers), so the group still opens there
    assert (skip.topic, skip.partition, skip.value) == ("t.transfer", 1, None)
    assert (contract.CONTROL, contract.SKIP) in skip.headers
    assert (contract.SEQ, b"0") in skip.headers and (contract.GUARANTEE_ID, b"g") in skip.headers
    assert forwarded.topic == "t.transfer"
    assert (lifetime.ROUTER_EXPIRES_AT, str(T0 + 1000).encode()) in forwarded.headers
    assert event.topic == "t.events" and event.key == b"g"
    assert dict(event.headers)[schemas.SCHEMA_HEADER] == events.EXPIRED_MESSAGE.encode()
    decoded = schemas.decode(events.EXPIRED_MESSAGE, event.value)
    assert decoded["hop"] == "SEND_UNIT" and decoded["guarantee_id"] == "g"
    assert decoded["seq"] == 0 and decoded["on_expiry"] == "SKIP"
    assert decoded["expires_at"] == datetime.fromtimestamp((T0 + 10) / 1000, UTC)
    assert decoded["value_size"] == 5
    assert (decoded["source_topic"], decoded["source_offset"]) == ("in", 2)
    assert {"key": lifetime.LIFETIME_MS, "value": b"10"} in decoded["headers"]
    assert (out.forwarded, out.expired, out.dead, out.consumed) == (1, 1, 0, 2)
