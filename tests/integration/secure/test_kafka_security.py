"""Kafka security (issue 13, item 3) on the SASL_SSL broker (SCRAM-SHA-512, StandardAuthorizer):
clear refusals for wrong credentials and missing ACLs (short: in `make test`), and the
whole pipeline with one user and the planned ACLs per role (`secure`: make test-secure)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from ops.harness.scenarios.demo_run import run_pipeline_workload, summary
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stack.securestack import SecureStack
from ops.harness.traffic.workload import WorkloadSpec
from router.backends.kafka import clients
from router.cli.acls import apply
from router.config import RouterSettings, load_settings
from router.security import acls
from router.security import kafka as kafkaauth
from router.topology.topics import ensure_topics
from tests.fixtures.helpers import unique, wait_until


def topology(stack: SecureStack, **env: str) -> tuple[RouterSettings, dict[str, str]]:
    """A fresh topology's settings (as the admin) and its topics."""
    base = {**stack.admin_env(), "ROUTER_TOPOLOGY__NAME": unique("sec"), **env}
    base["ROUTER_REDIS__KEY_PREFIX"] = unique("secp")
    nested: dict[str, dict[str, object]] = {}
    for key, value in base.items():
        section, _, name = key.removeprefix("ROUTER_").lower().partition("__")
        nested.setdefault(section, {})[name] = value
    nested["kafka"]["client_config"] = stack.kafka_settings("admin", Path("/")).client_config
    settings = load_settings(None, **nested)
    admin = stack.kafka_admin()
    ensure_topics(settings, admin)
    return settings, base


def role_user(
    stack: SecureStack,
    admin: AdminClient,
    settings: RouterSettings,
    role: str,
    without: tuple[str, str] | None = None,
    receive_queues: list[str] | None = None,
) -> tuple[str, Path]:
    """A SCRAM user for `role` with its planned ACLs (less `without`: (operation, topic));
    returns once the broker authorizes it so."""
    user = f"{settings.topology.name}-{role}"
    password = stack.kafka_user(admin, user)
    planned = acls.role_acls(settings, role, f"User:{user}", receive_queues)
    planned = [a for a in planned if without is None or (a.operation, a.name) != without]
    apply(admin, planned)
    as_user = settings.model_copy(update={"kafka": stack.kafka_settings(user, password)})
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{user}", None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip

    def applied() -> bool:
        try:
            known = admin.describe_user_scram_credentials([user])[user].result(timeout=10)
        except KafkaException as exc:  # the broker has not heard of the new user yet
            if exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
                return False
            raise
        return bool(known) and len(admin.describe_acls(everything).result(10)) == len(planned)

    wait_until(applied, 30, f"the broker to know {user} and its {len(planned)} ACLs")

    def authorized() -> bool:  # the topics exist: the broker says what the user may do
        try:
            kafkaauth.check_access(as_user, role, timeout=5)
        except kafkaauth.KafkaRefused as exc:
            return without is not None and str(exc).count(";") == 0 and without[1] in str(exc)
        return without is None

    if without is not None:
        wait_until(authorized, 30, f"the broker to authorize {user} as planned")
    return user, password


def run_role(env: dict[str, str], role: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "router.toml"
    config.write_text("")
    return subprocess.run(
        [sys.executable, "-m", "router", "--config", str(config), role],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_wrong_credentials_give_a_clear_authentication_error(
    secure_kafka: SecureStack, secure_redis: SecureStack, tmp_path: Path
) -> None:
    _, env = topology(secure_kafka)
    env["ROUTER_KAFKA__SASL_PASSWORD_FILE"] = str(secure_kafka.new_secret("kafka-wrong"))
    done = run_role(env, "send-unit", tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "refused the credentials of user 'admin'" in done.stderr
    assert "SASL authentication error" in done.stderr


def test_a_send_unit_without_write_on_the_transfer_topic_fails_fast(
    secure_kafka: SecureStack, secure_redis: SecureStack, tmp_path: Path
) -> None:
    settings, env = topology(secure_kafka)
    admin = secure_kafka.kafka_admin()
    transfer = settings.topology.transfer_topic
    user, password = role_user(
        secure_kafka, admin, settings, "send-unit", without=("WRITE", transfer)
    )
    redis_admin = secure_kafka.secret_file("redis-admin")
    env = {**env, **secure_kafka.client_env(user, password, "admin", redis_admin)}
    done = run_role(env, "send-unit", tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"lacks ACLs the send-unit role needs: WRITE {transfer}" in done.stderr
    assert "router acls plan --role send-unit" in done.stderr


def test_a_receiver_without_read_acl_on_another_receive_queue_is_refused(
    secure_kafka: SecureStack, tmp_path: Path
) -> None:
    settings, _ = topology(secure_kafka)
    admin = secure_kafka.kafka_admin()
    mine, other = settings.topology.receive_queues[:2]
    user, password = role_user(secure_kafka, admin, settings, "receiver", receive_queues=[mine])
    kafka = secure_kafka.kafka_settings(user, password)
    group = f"{settings.topology.name}.receiver-billing"
    config = clients.consumer_config(kafka, group, "billing")
    consumer = Consumer({**config, "error_cb": lambda _: None})
    consumer.subscribe([mine, other])
    seen: list[KafkaError] = []

    def refused() -> bool:
        m = consumer.poll(0.2)
        if m is not None and m.error() is not None:
            seen.append(m.error())
        return any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in seen)

    wait_until(refused, 30, f"the broker to refuse {user} on {other}")
    error = next(e for e in seen if e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)
    message = kafkaauth.refusal(error, kafka, "receiver")
    assert message is not None and "access to a topic" in message, message
    consumer.close()


@pytest.mark.secure
def test_the_pipeline_runs_on_sasl_ssl_with_an_acl_user_per_role(
    secure_kafka: SecureStack, secure_redis: SecureStack, tmp_path: Path
) -> None:
    spec = PipelineSpec(send_units=2, receive_units=2, transfer_partitions=4, receive_queues=6)
    spec = replace(spec, extra_env=secure_kafka.admin_env())
    p = Pipeline(None, spec, tmp_path / "run", name=unique("sec"))
    try:
        admin = secure_kafka.kafka_admin()
        role_env = {}
        redis_password = secure_redis.router_redis_user(f"{p.name}-router", p.settings)
        for role in ("send-unit", "receive-unit", "sweeper"):
            user, password = role_user(secure_kafka, admin, p.settings, role)
            env = secure_kafka.client_env(user, password, f"{p.name}-router", redis_password)
            role_env[role] = env
        p.spec = replace(p.spec, role_env=role_env)
        p.start()
        workload = WorkloadSpec(run_id=p.name, senders=2, messages=1500, rate=250, max_group=20)
        result = run_pipeline_workload(p, workload, say=lambda _: None, timeout=240)
        r = result.report
        text = "\n".join(summary(result))
        assert r.sent == workload.messages and r.received == r.sent, text
        assert (r.lost, r.duplicated, r.unexpected, r.reordered, r.split_groups) == (0, 0, 0, 0, 0)
        assert all(code == 0 for code in result.exit_codes.values()), result.exit_codes
        assert result.violations == [], text
    finally:
        p.stop()
        p.cleanup()
