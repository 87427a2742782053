"""The least-privilege Kafka ACLs of each role, derived from the topology (pure: no I/O).

A broker with an authorizer (`StandardAuthorizer`, `allow.everyone.if.no.acl.found=false`)
lets a principal do only what an ACL allows. `plan` lists, per role, exactly what the
router's code does with Kafka:

* send-unit: read the send queues, read and write the send-side room, write the transfer
  topic, dead letters and events; read its group `<name>.send-units`; transactional IDs
  `<name>.send.*`.
* receive-unit: read the transfer topic, read and write the receive-side room, write the
  receive queues, dead letters and events; read `<name>.receive-units`; transactional IDs
  `<name>.receive.*`.
* sweeper: read the send queues, transfer topic and rooms (its horizons), write events;
  describe both unit groups (their committed offsets); read `<name>.sweeper-horizon`.
* sender: write the send queues; describe `<name>.send-units` (the backlog estimate).
* receiver: read the receive queues (all, or those given: one application's); read the
  groups `<name>.receiver*` (a receiving application's group ID starts so).
* spark: write the send queues, read the receive queues; read the groups
  `spark-kafka-source*` (Spark's Kafka source; its `groupIdPrefix` option changes it).

Every topic a role reads or writes it may also describe (metadata, offsets). Creating
topics and ACLs (`router topics create`, `router acls apply`) is the administrator's: a
super user, never a role. `router acls plan` prints this; `router acls apply` creates it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from router.config.settings import RouterSettings
from router.contract.priority import band_topics
from router.errors import InvalidRequest

ROLES = ("send-unit", "receive-unit", "sweeper", "sender", "receiver", "spark")
# Spark's Kafka source names its consumer groups so unless given groupIdPrefix.
SPARK_GROUP_PREFIX = "spark-kafka-source"


@dataclass(frozen=True, order=True)
class Acl:
    """ALLOW `principal` to do `operation` on the resource (`pattern`: LITERAL or PREFIXED)."""

    principal: str
    resource: str  # TOPIC, GROUP, TRANSACTIONAL_ID
    pattern: str
    name: str
    operation: str  # READ, WRITE, DESCRIBE
    host: str = "*"

    def line(self) -> str:
        return (
            f"ALLOW {self.principal:28} {self.operation:9} {self.resource:16} "
            f"{self.pattern:8} {self.name}"
        )


def default_principals(settings: RouterSettings) -> dict[str, str]:
    """`User:<topology>-<role>`: one SCRAM user per role and topology."""
    return {role: f"User:{settings.topology.name}-{role}" for role in ROLES}


def role_acls(
    settings: RouterSettings,
    role: str,
    principal: str,
    receive_queues: Sequence[str] | None = None,
) -> list[Acl]:
    """The ACLs of one role (sorted, no duplicates). `receive_queues` narrows the
    receiver role to some receive queues (one receiving application's)."""
    t = settings.topology
    rooms = [t.room_topic("send"), t.room_topic("receive")]
    out: list[Acl] = []

    banded = {*t.send_queues, t.transfer_topic, *t.receive_queues}  # router.contract.priority
    bands = settings.priority.bands

    def topics(names: Iterable[str], *ops: str) -> None:
        for base in names:
            for name in band_topics(base, bands) if base in banded else [base]:
                for op in {*ops, "DESCRIBE"}:
                    out.append(Acl(principal, "TOPIC", "LITERAL", name, op))

    def group(name: str, op: str, pattern: str = "LITERAL") -> None:
        out.append(Acl(principal, "GROUP", pattern, name, op))

    def transactions(prefix: str) -> None:
        for op in ("WRITE", "DESCRIBE"):
            out.append(Acl(principal, "TRANSACTIONAL_ID", "PREFIXED", prefix, op))

    if role in ("send-unit", "receive-unit"):
        side = "send" if role == "send-unit" else "receive"
        sources = t.send_queues if side == "send" else [t.transfer_topic]
        dests = [t.transfer_topic] if side == "send" else t.receive_queues
        topics(sources, "READ")
        topics([t.room_topic(side)], "READ", "WRITE")
        topics([*dests, t.dead_letter_topic, t.events_topic], "WRITE")
        group(t.send_group if side == "send" else t.receive_group, "READ")
        # `router.backends.kafka.clients.transactional_id`: <topology>.<side>.<instance>.<random>
        transactions(f"{t.name}.{side}.")
    elif role == "sweeper":
        topics([*t.send_queues, t.transfer_topic, *rooms], "READ")
        topics([t.events_topic], "WRITE")
        group(t.send_group, "DESCRIBE")
        group(t.receive_group, "DESCRIBE")
        group(f"{t.name}.sweeper-horizon", "READ")
    elif role == "sender":
        topics(t.send_queues, "WRITE")
        group(t.send_group, "DESCRIBE")
    elif role == "receiver":
        queues = list(receive_queues) if receive_queues is not None else t.receive_queues
        unknown = sorted(set(queues) - set(t.receive_queues))
        if unknown:
            raise InvalidRequest(f"not receive queues of topology {t.name}: {unknown}")
        topics(queues, "READ")
        topics([t.dead_letter_topic, t.events_topic], "WRITE")  # max-deliveries (receiver.md)
        group(f"{t.name}.receiver", "READ", "PREFIXED")
    elif role == "spark":
        topics(t.send_queues, "WRITE")
        topics(t.receive_queues, "READ")
        group(SPARK_GROUP_PREFIX, "READ", "PREFIXED")
    else:
        raise InvalidRequest(f"unknown role {role!r}; one of {', '.join(ROLES)}")
    return sorted(set(out))


def plan(
    settings: RouterSettings,
    principals: Mapping[str, str] | None = None,
    roles: Sequence[str] = ROLES,
    receive_queues: Sequence[str] | None = None,
) -> dict[str, list[Acl]]:
    """Role -> its ACLs, for the roles asked (default: all), each for its principal
    (default: `default_principals`; `principals` overrides some)."""
    who = {**default_principals(settings), **(principals or {})}
    unknown = sorted(set(who) - set(ROLES))
    if unknown:
        raise InvalidRequest(f"unknown roles {unknown}; roles are {', '.join(ROLES)}")
    return {role: role_acls(settings, role, who[role], receive_queues) for role in roles}


def parse_principals(pairs: Iterable[str]) -> dict[str, str]:
    """`role=User:name` (or `role=name`) pairs, as the CLI takes them."""
    out: dict[str, str] = {}
    for pair in pairs:
        role, sep, name = pair.partition("=")
        if not sep or not name or role not in ROLES:
            raise InvalidRequest(
                f"expected ROLE=PRINCIPAL, ROLE one of {', '.join(ROLES)}: {pair!r}"
            )
        out[role] = name if name.startswith("User:") else f"User:{name}"
    return out


def render(planned: Mapping[str, list[Acl]], redis_rule: Sequence[str] = ()) -> str:
    """The plan as text: per role its principal and ACLs; then the Redis user's rule."""
    lines: list[str] = []
    for role, acls in planned.items():
        principal = acls[0].principal if acls else "?"
        lines.append(f"# {role} ({principal}): {len(acls)} ACLs")
        lines.extend(a.line() for a in acls)
        lines.append("")
    if redis_rule:
        lines.append("# Redis: one ACL user for the units, the sweeper, router table and metrics")
        lines.append("ACL SETUSER <user> on ><password> " + " ".join(redis_rule))
    return "\n".join(lines).rstrip() + "\n"
