"""The per-role ACL plan (`router.security.acls`) and the Spark jobs' Kafka security options."""

from __future__ import annotations

import argparse

import pytest
from click.testing import CliRunner

from router.cli import cli
from router.config import KafkaSettings, RouterSettings
from router.security import acls
from spark_jobs.session import kafka_options

S = RouterSettings(topology={"name": "orders", "receive_queue_count": 2})  # type: ignore[arg-type]


def ops(role: str, **kw: object) -> set[tuple[str, str, str, str]]:
    return {
        (a.resource, a.pattern, a.name, a.operation)
        for a in acls.role_acls(S, role, f"User:{role}", **kw)  # type: ignore[arg-type]
    }


def test_units_read_their_sources_and_write_their_destinations_only() -> None:
    send = ops("send-unit")
    assert ("TOPIC", "LITERAL", "orders.send.1", "READ") in send
    assert ("TOPIC", "LITERAL", "orders.transfer", "WRITE") in send
    assert ("GROUP", "LITERAL", "orders.send-units", "READ") in send
    assert ("TRANSACTIONAL_ID", "PREFIXED", "orders.send.", "WRITE") in send
    assert not any(name.startswith("orders.recv") for _, _, name, _ in send)
    assert not any(
        op == "WRITE" and name.startswith("orders.send.") for r, _, name, op in send if r == "TOPIC"
    )
    receive = ops("receive-unit")
    assert ("TOPIC", "LITERAL", "orders.transfer", "READ") in receive
    assert ("TOPIC", "LITERAL", "orders.recv.2", "WRITE") in receive
    assert ("TRANSACTIONAL_ID", "PREFIXED", "orders.receive.", "WRITE") in receive
    assert ("TOPIC", "LITERAL", "orders.transfer", "WRITE") not in receive


def test_every_topic_used_is_also_described_and_nothing_is_created_or_altered() -> None:
    for role in acls.ROLES:
        got = ops(role)
        used = {name for r, _, name, op in got if r == "TOPIC" and op != "DESCRIBE"}
        assert used == {name for r, _, name, op in got if r == "TOPIC" and op == "DESCRIBE"}
        assert {op for *_, op in got} <= {"READ", "WRITE", "DESCRIBE"}, role


def test_clients_and_spark() -> None:
    assert ops("sender") == {
        ("TOPIC", "LITERAL", "orders.send.1", "WRITE"),
        ("TOPIC", "LITERAL", "orders.send.1", "DESCRIBE"),
        ("TOPIC", "LITERAL", "orders.send.2", "WRITE"),
        ("TOPIC", "LITERAL", "orders.send.2", "DESCRIBE"),
        ("GROUP", "LITERAL", "orders.send-units", "DESCRIBE"),
    }
    one = ops("receiver", receive_queues=["orders.recv.2"])
    assert {n for r, _, n, _ in one if r == "TOPIC"} == {
        "orders.recv.2",
        "orders.dlq",
        "orders.events",
    }
    assert ("TOPIC", "LITERAL", "orders.recv.2", "WRITE") not in one
    assert ("TOPIC", "LITERAL", "orders.dlq", "WRITE") in one
    assert ("GROUP", "PREFIXED", "orders.receiver", "READ") in one
    with pytest.raises(ValueError, match="not receive queues"):
        ops("receiver", receive_queues=["orders.transfer"])
    assert ("GROUP", "PREFIXED", "spark-kafka-source", "READ") in ops("spark")


def test_principals_default_per_role_and_can_be_named() -> None:
    planned = acls.plan(S, acls.parse_principals(["sender=billing-app"]))
    assert set(planned) == set(acls.ROLES)
    assert {a.principal for a in planned["sender"]} == {"User:billing-app"}
    assert {a.principal for a in planned["sweeper"]} == {"User:orders-sweeper"}
    with pytest.raises(ValueError, match="ROLE=PRINCIPAL"):
        acls.parse_principals(["nobody=x"])


def test_router_acls_plan_prints_every_role_and_the_redis_rule() -> None:
    out = CliRunner().invoke(cli, ["acls", "plan"], env={"ROUTER_TOPOLOGY__NAME": "orders"})
    assert out.exit_code == 0, out.output
    for role in acls.ROLES:
        assert f"# {role} (User:orders-{role})" in out.output
    assert "ACL SETUSER <user> on ><password> resetkeys" in out.output
    assert "~router:{orders:send}:*" in out.output


def test_spark_jobs_take_security_from_the_settings_not_the_command_line() -> None:
    kafka = KafkaSettings(
        bootstrap_servers="h:9192",
        client_config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "spark",
            "ssl.ca.location": "/ca.pem",
        },
        sasl_password="s3cret",  # type: ignore[arg-type]
    )
    options = kafka_options(kafka, {"max.poll.records": "50"})
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.ssl.truststore.location"] == "/ca.pem"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="spark" password="s3cret";'
    )
    assert options["kafka.max.poll.records"] == "50"
    for key in ("sasl.jaas.config", "kafka.ssl.key.password", "ssl.truststore.password"):
        with pytest.raises(argparse.ArgumentTypeError, match="secret on the command line"):
            kafka_options(kafka, {key: "x"})
