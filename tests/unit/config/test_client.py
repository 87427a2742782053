"""The sender's and receiver's configuration from a plain librdkafka dict (pure)."""

from __future__ import annotations

import re

import pytest

from router.config import client as clientconfig


def test_the_producer_keeps_the_callers_settings_and_adds_idempotence() -> None:
    config = clientconfig.producer_config(
        {"bootstrap.servers": "b:9092", "linger.ms": 50, "security.protocol": "SASL_SSL"}, "me"
    )
    assert config == {
        "bootstrap.servers": "b:9092",
        "linger.ms": 50,  # the caller's, over our default
        "compression.type": "lz4",
        "security.protocol": "SASL_SSL",
        "client.id": "me",
        "enable.idempotence": True,
        "acks": "all",
    }
    # Saying what is required anyway is fine, in any spelling librdkafka accepts.
    for same in ({"enable.idempotence": "true"}, {"acks": -1}, {"request.required.acks": "all"}):
        clientconfig.producer_config(same, "me")


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"enable.idempotence": False}, "enable.idempotence"),
        ({"enable.idempotence": "false"}, "enable.idempotence"),
        ({"acks": 1}, "acks"),
        ({"request.required.acks": "0"}, "request.required.acks"),
        ({"transactional.id": "t"}, "transactional.id"),
    ],
)
def test_the_producer_refuses_what_would_break_a_groups_order(
    config: dict[str, object], names: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(names)):
        clientconfig.producer_config(config, "me")


def test_the_consumer_needs_a_group_and_reads_committed_data_only() -> None:
    config = clientconfig.consumer_config({"group.id": "g", "enable.auto.commit": False}, "me")
    assert config["isolation.level"] == "read_committed"
    assert config["enable.auto.offset.store"] is False
    assert config["enable.auto.commit"] is False  # the caller's choice: commits on revoke/close
    assert config["auto.offset.reset"] == "earliest"
    assert config["fetch.queue.backoff.ms"] == 10  # librdkafka's 1,000 holds a fast reader
    mine = {"group.id": "g", "fetch.queue.backoff.ms": 250}
    assert clientconfig.consumer_config(mine, "me")["fetch.queue.backoff.ms"] == 250
    with pytest.raises(ValueError, match=re.escape("group.id")):
        clientconfig.consumer_config({"bootstrap.servers": "b"}, "me")
    with pytest.raises(ValueError, match=re.escape("isolation.level")):
        clientconfig.consumer_config({"group.id": "g", "isolation.level": "read_uncommitted"}, "x")
    with pytest.raises(ValueError, match=re.escape("enable.auto.offset.store")):
        clientconfig.consumer_config({"group.id": "g", "enable.auto.offset.store": True}, "x")


def test_helper_clients_get_the_connection_settings_only() -> None:
    config = {
        "bootstrap.servers": "b",
        "sasl.username": "u",
        "client.id": "c",
        "linger.ms": 5,
        "acks": "all",
        "group.id": "g",
    }
    assert clientconfig.connection_config(config) == {
        "bootstrap.servers": "b",
        "sasl.username": "u",
        "client.id": "c",
    }


def test_a_topologys_queues_are_found_by_name_in_number_order() -> None:
    topics = ["shop.send.10", "shop.send.2", "shop.send.1", "shop.recv.1", "shopx.send.3"]
    topics += ["shop.send.x", "shop.transfer", "other.send.1"]
    assert clientconfig.topology_queues("shop", "send", topics) == [
        "shop.send.1",
        "shop.send.2",
        "shop.send.10",
    ]
    assert clientconfig.topology_queues("shop", "receive", topics) == ["shop.recv.1"]
    # A dot in a name is literal, not "any character".
    assert clientconfig.topology_queues("a.b", "send", ["a.b.send.1", "axb.send.1"]) == [
        "a.b.send.1"
    ]
    assert clientconfig.units_group("shop") == "shop.send-units"
    with pytest.raises(ValueError):
        clientconfig.topology_queues("no spaces", "send", [])
