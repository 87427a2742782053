"""A unit's own links through Toxiproxy (ops.harness.stack.netlinks) carry ALL of its traffic:
the broker advertises the slot's listener at the proxy's port, so every broker connection a
client bootstrapped there makes goes through the proxy. Cutting a slot cuts that client
off from the broker (metadata, produce) and from Redis, while a client of another slot,
and a direct one, go on; healing it lets the same client through again."""

from __future__ import annotations

import pytest
import redis
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.netlinks import UnitLinks
from ops.harness.stack.netplan import NetFault
from ops.harness.stack.toxiproxy import Toxiproxy
from tests.fixtures.helpers import unique, wait_until

pytestmark = pytest.mark.slow


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})


def answers(client: AdminClient) -> bool:
    try:
        client.list_topics(timeout=2)
        return True
    except KafkaException:
        return False


def test_a_cut_slot_loses_the_broker_and_redis_while_others_do_not(
    private_stack: LocalStack, toxiproxy: Toxiproxy
) -> None:
    links = UnitLinks(toxiproxy, private_stack, private_stack.redis_url, {"send-unit": 2})
    one, other = links.links
    env = one.env(private_stack.redis_url)
    bootstrap = env["ROUTER_KAFKA__BOOTSTRAP_SERVERS"]
    # Every broker the client is told of is the slot's proxy, not the broker's own port.
    brokers = admin(bootstrap).list_topics(timeout=10).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", one.kafka_port)]
    topic = unique("netprobe")
    direct = admin(private_stack.bootstrap)
    direct.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3000})
    outcomes: list[str | None] = []

    def produce() -> None:
        producer.produce(topic, b"x", on_delivery=lambda e, m: outcomes.append(e and str(e)))
        producer.flush(10)

    produce()
    assert outcomes == [None], "a produce through the slot before the cut"
    client = admin(bootstrap)
    red = redis.Redis.from_url(env["ROUTER_REDIS__URL"], socket_timeout=1)
    assert answers(client) and red.ping()

    kafka_cut = NetFault(0.0, "kafka-cut", one.slot, 10.0)
    redis_cut = NetFault(0.0, "redis-cut", one.slot, 10.0)
    links.apply(kafka_cut)
    links.apply(redis_cut)
    try:
        # The slot's clients, already connected or new, get nothing through...
        assert not answers(client) and not answers(admin(bootstrap))
        produce()
        assert len(outcomes) == 2 and outcomes[1], "a produce through a cut link was acknowledged"
        with pytest.raises(redis.exceptions.TimeoutError):
            red.ping()
        # ...while another slot's and a direct client's do.
        assert answers(admin(other.env(private_stack.redis_url)["ROUTER_KAFKA__BOOTSTRAP_SERVERS"]))
        assert answers(admin(private_stack.bootstrap))
        assert redis.Redis.from_url(other.env(private_stack.redis_url)["ROUTER_REDIS__URL"]).ping()
    finally:
        links.heal(kafka_cut)
        links.heal(redis_cut)
    assert toxiproxy.toxics(one.proxy("kafka")) == toxiproxy.toxics(one.proxy("redis")) == []
    wait_until(lambda: answers(client), 30, "the healed slot's client to reach the broker")
    red = redis.Redis.from_url(env["ROUTER_REDIS__URL"], socket_timeout=1)
    assert red.ping()
    produce()
    assert outcomes[2:] == [None], "a produce through the healed slot"
    direct.delete_topics([topic])[topic].result(timeout=30)
