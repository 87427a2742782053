"""The send unit's check of a registry-framed payload against its type's subject (pure: a
stand-in answers what the registry would; the real one is in
tests/integration/registry/test_schema_registry.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from router.backends.registry import framing
from router.backends.registry.client import RegistryUnavailable, SchemaNotFound
from router.config import load_settings
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier, registry_check
from tests.fixtures.fakes import FakeMessage

ORDER = json.dumps(
    {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
)


class Answers:
    """What a registry holds: ID -> (schema, subjects); `away`: it cannot be reached."""

    def __init__(self, held: dict[int, tuple[str, set[str]]], away: bool = False) -> None:
        self.held, self.away = held, away

    def parsed(self, schema_id: int) -> Any:
        if self.away:
            raise RegistryUnavailable("connection refused")
        if schema_id not in self.held:
            raise SchemaNotFound(f"no schema {schema_id}")
        return framing.parse(self.held[schema_id][0])

    def in_subject(self, schema_id: int, subject: str) -> bool:
        return subject in self.held[schema_id][1]


REGISTRY = Answers({1: (ORDER, {"orders-value"}), 2: (ORDER, {"refunds-value"})})
GOOD = framing.encode(framing.parse(ORDER), 1, {"id": "o-1"})


def check(value: bytes, registry: Answers = REGISTRY) -> None:
    registry_check(registry, "orders-value", value)  # type: ignore[arg-type]


def test_a_framed_payload_of_a_version_of_the_subject_passes() -> None:
    check(GOOD)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (GOOD[5:], "unframed"),
        (framing.frame(9, GOOD[5:]), "unknown-id"),
        (framing.frame(2, GOOD[5:]), "wrong-subject"),
        (framing.frame(1, b"\x08o-"), "undecodable"),
    ],
)
def test_each_fault_of_the_payload_has_its_reason(value: bytes, reason: str) -> None:
    with pytest.raises(framing.BadFrame) as caught:
        check(value)
    assert caught.value.reason == reason


def test_a_registry_away_is_not_the_payloads_fault() -> None:
    with pytest.raises(RegistryUnavailable):
        check(GOOD, Answers({}, away=True))


def classify_with(registry: Answers, messages: list[FakeMessage]) -> Batch:
    settings = load_settings(
        registry={"url": "http://registry.invalid"},
        routing={"ttl_by_type": {"order": 60_000}, "subject_by_type": {"order": "orders-value"}},
    )
    batch = Batch("b", 0)
    classifier = Classifier(settings, "send", {}, registry)  # type: ignore[arg-type]
    classifier.classify(batch, messages)  # type: ignore[arg-type]
    return batch


def typed(partition: int, offset: int, value: bytes) -> FakeMessage:
    return FakeMessage("q", partition, offset, value, None, [("message-type", b"order")])


def test_the_send_unit_dead_letters_each_fault_with_its_reason_code() -> None:
    values = [GOOD, GOOD[5:], framing.frame(9, GOOD[5:]), framing.frame(2, GOOD[5:])]
    values.append(framing.frame(1, b"\x08o-"))
    batch = classify_with(REGISTRY, [typed(0, i, v) for i, v in enumerate(values)])
    assert batch.failure is None
    assert [i.bad.code if i.bad else None for i in batch.items] == [
        None,
        "unframed-payload",
        "unknown-schema-id",
        "wrong-subject",
        "undecodable-payload",
    ]


def test_the_registry_away_fails_the_batch_and_every_partition_rewinds_to_its_first() -> None:
    messages = [typed(0, 5, GOOD), typed(1, 7, GOOD), typed(0, 6, GOOD), typed(2, 3, b"x")]
    batch = classify_with(Answers({}, away=True), messages)
    assert batch.failure is not None and "Schema Registry unavailable" in batch.failure
    # the first message failed: the others were tracked all the same, so a rewind covers them
    assert batch.first == {("q", 0): 5, ("q", 1): 7, ("q", 2): 3}
