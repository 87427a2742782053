"""Before a process starts work: does Kafka accept our credentials, and do our ACLs allow
what the role does (`router.security.acls`)? A refusal is said clearly and ends the process, where
retrying could only hide it; a broker that does not answer is not a refusal.

The check asks the broker, per topic the role uses, which operations this principal may
perform (KIP-430: `describe_topics(include_authorized_operations=True)`), and compares
them with the role's planned ACLs. A topic that does not exist yet is left to the usual
errors. Consumer groups and transactional IDs are not described this way; a missing ACL
there is reported by the unit when the broker refuses (`refusal`).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections import defaultdict
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from router.backends.kafka import clients
from router.config.settings import KafkaSettings, RouterSettings
from router.errors import RouterError
from router.security import acls

AUTHENTICATION = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
AUTHORIZATION = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "consumer group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional ID",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}


class KafkaRefused(RouterError, RuntimeError):
    """Kafka refused the credentials, or an ACL the role needs is missing."""


def _user(kafka: KafkaSettings) -> str:
    return kafka.client_config.get("sasl.username", "(no SASL user)")


def refusal(error: KafkaError | None, kafka: KafkaSettings, role: str) -> str | None:
    """A clear message if `error` is the broker refusing us (bad credentials, a missing
    ACL), else None (the broker away, a transient error)."""
    if error is None:
        return None
    code = error.code()
    if code in AUTHENTICATION:
        return (
            f"Kafka at {kafka.bootstrap_servers} refused the credentials of user "
            f"{_user(kafka)!r} ({error.str()}): check kafka.client_config's sasl.username "
            "and sasl.mechanism and kafka.sasl_password / kafka.sasl_password_file"
        )
    if code in AUTHORIZATION:
        return (
            f"Kafka refused user {_user(kafka)!r} access to a {AUTHORIZATION[code]} "
            f"({error.str()}): the {role} role needs the ACLs `router acls plan --role "
            f"{role}` prints"
        )
    return None


def needs(settings: RouterSettings, role: str) -> dict[str, set[str]]:
    """Topic -> operations the role performs on it (from its planned ACLs)."""
    out: dict[str, set[str]] = defaultdict(set)
    rooms = {settings.topology.room_topic(s) for s in ("send", "receive")}
    for acl in acls.role_acls(settings, role, "User:check"):
        if acl.resource != "TOPIC":
            continue
        if acl.name in rooms and settings.routing.busy_policy != "wait":
            continue  # a room is only used by the wait policy
        out[acl.name].add(acl.operation)
    return dict(out)


def check_access(settings: RouterSettings, role: str, timeout: float = 15.0) -> None:
    """Raise KafkaRefused if the broker refuses our credentials or the role's topic ACLs;
    return if they are in order, or if the broker does not answer within `timeout`."""
    if role not in acls.ROLES:
        return
    wanted = needs(settings, role)
    refused: list[KafkaError] = []

    def on_error(err: KafkaError) -> None:
        if err.code() in AUTHENTICATION:
            refused.append(err)

    admin = AdminClient({**clients.admin_config(settings.kafka), "error_cb": on_error})
    try:
        futures: dict[str, Any] = admin.describe_topics(
            TopicCollection(sorted(wanted)),
            request_timeout=timeout,
            include_authorized_operations=True,
        )
        deadline = time.monotonic() + timeout
        pending = set(futures.values())
        while pending and not refused and time.monotonic() < deadline:
            admin.poll(0.05)  # serves error_cb
            _, pending = concurrent.futures.wait(pending, timeout=0.05)
        if refused:
            raise KafkaRefused(refusal(refused[0], settings.kafka, role))
        missing = []
        for topic, future in sorted(futures.items()):
            if not future.done():
                return  # the broker does not answer: not a refusal
            try:
                authorized = future.result().authorized_operations
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    missing.append(f"DESCRIBE {topic}")
                continue  # not created yet, or the broker away: the usual errors say
            if authorized is None:
                continue  # the broker did not say: no check
            ops = {op.name for op in authorized}
            if "ALL" not in ops:
                missing += [f"{op} {topic}" for op in sorted(wanted[topic] - ops)]
        if missing:
            raise KafkaRefused(
                f"Kafka user {_user(settings.kafka)!r} lacks ACLs the {role} role needs: "
                f"{'; '.join(missing)} (topic operations). `router acls plan --role {role}` "
                "prints them, `router acls apply` creates them"
            )
    finally:
        clients.dispose_in_background([admin])
        del admin
