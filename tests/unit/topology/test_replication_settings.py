"""Replication on a three-broker cluster (issue 13, item 1), without servers: the topics'
replication factor and min.insync.replicas, and acks=all with idempotence for every
producer the router builds, whatever the operator's client_config says."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from router.backends.kafka import clients
from router.config import KafkaSettings, RouterSettings
from router.topology.topics import plan, replication


@pytest.mark.parametrize(
    ("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))]
)
def test_unset_replication_follows_the_cluster(brokers: int, expected: tuple[int, int]) -> None:
    assert replication(KafkaSettings(), brokers) == expected


def test_set_replication_wins_and_reaches_every_topic() -> None:
    k = KafkaSettings(replication_factor=3, min_insync_replicas=3)
    assert replication(k, 5) == (3, 3)
    specs = plan(RouterSettings(kafka=KafkaSettings()), brokers=3)
    assert {s.config["min.insync.replicas"] for s in specs} == {"2"}


def test_min_insync_above_the_replication_factor_is_refused() -> None:
    with pytest.raises(ValidationError, match="min_insync_replicas"):
        KafkaSettings(replication_factor=2, min_insync_replicas=3)


@pytest.mark.parametrize("override", [{"acks": "1"}, {"enable.idempotence": "false"}])
def test_every_producer_writes_with_acks_all_and_idempotence(override: dict[str, str]) -> None:
    k = KafkaSettings(client_config=override)
    for config in (
        clients.idempotent_producer_config(k, "sender"),
        clients.transactional_producer_config(k, "unit.txn", "unit"),
    ):
        assert config["acks"] == "all"
        assert config["enable.idempotence"] is True
