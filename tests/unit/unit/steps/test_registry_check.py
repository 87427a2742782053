"""The send unit's check of a registry-framed payload against its type's subject (pure: a
stand-in answers what the registry would; the real one is in
tests/integration/registry/test_schema_registry.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from router.backends.registry import framing
from router.backends.registry.client import RegistryUnavailable, SchemaNotFound
from router.unit.steps.classify import registry_check

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
