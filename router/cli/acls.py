"""`router acls plan|apply`: the least-privilege ACLs of `router.security.acls`, printed or
created."""

from __future__ import annotations

from collections.abc import Iterable

import click
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from router.backends.kafka.clients import admin_config
from router.config.settings import RouterSettings
from router.security import acls
from router.security.redis import acl_rule


def bindings(planned: Iterable[acls.Acl]) -> list[AclBinding]:
    return [
        AclBinding(
            ResourceType[a.resource],
            a.name,
            ResourcePatternType[a.pattern],
            a.principal,
            a.host,
            AclOperation[a.operation],
            AclPermissionType.ALLOW,
        )
        for a in planned
    ]


def apply(admin: AdminClient, planned: Iterable[acls.Acl], timeout: float = 30.0) -> int:
    """Create the ACLs (idempotent: an existing one is left as it is); returns how many.
    Raises KafkaException if the broker refuses (the caller is not an administrator)."""
    wanted = bindings(planned)
    if not wanted:
        return 0
    for future in admin.create_acls(wanted, request_timeout=timeout).values():
        future.result(timeout=timeout)
    return len(wanted)


_roles = click.option(
    "--role",
    "roles",
    multiple=True,
    type=click.Choice(acls.ROLES),
    help="Only this role (repeatable; default: every role).",
)
_principals = click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="ROLE=PRINCIPAL",
    help="The role's principal (default User:<topology>-<role>); repeatable.",
)
_queues = click.option(
    "--receive-queue",
    "queues",
    multiple=True,
    help="Narrow the receiver role to these receive queues (repeatable; default: all).",
)


Strings = tuple[str, ...]


def _plan(
    settings: RouterSettings, roles: Strings, principals: Strings, queues: Strings
) -> dict[str, list[acls.Acl]]:
    try:
        return acls.plan(
            settings,
            acls.parse_principals(principals),
            roles or acls.ROLES,
            list(queues) if queues else None,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.group("acls")
def acls_group() -> None:
    """Least-privilege Kafka ACLs (and the Redis ACL rule) of each role of the topology."""


@acls_group.command("plan")
@_roles
@_principals
@_queues
@click.pass_context
def acls_plan(ctx: click.Context, roles: Strings, principals: Strings, queues: Strings) -> None:
    """Print the ACLs each role needs, without touching Kafka."""
    settings: RouterSettings = ctx.obj["settings"]
    planned = _plan(settings, roles, principals, queues)
    click.echo(acls.render(planned, acl_rule(settings)), nl=False)


@acls_group.command("apply")
@_roles
@_principals
@_queues
@click.pass_context
def acls_apply(ctx: click.Context, roles: Strings, principals: Strings, queues: Strings) -> None:
    """Create the planned ACLs on the broker (as an administrator: the settings' Kafka
    user must be allowed to alter the cluster's ACLs, e.g. a super user)."""
    settings: RouterSettings = ctx.obj["settings"]
    planned = _plan(settings, roles, principals, queues)
    admin = AdminClient(admin_config(settings.kafka))
    for role, role_acls in planned.items():
        try:
            n = apply(admin, role_acls)
        except Exception as exc:  # the broker's refusal, as it put it
            raise click.ClickException(f"creating the ACLs of {role} failed: {exc}") from exc
        click.echo(f"{role:13} {n:3} ACLs  {role_acls[0].principal if role_acls else ''}")
