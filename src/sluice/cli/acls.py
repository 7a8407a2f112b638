"""`sluice acls add|list|remove`: a thin CLI over CreateAcls, DescribeAcls and DeleteAcls (like kafka-acls),
through confluent-kafka's AdminClient, so it works against sluice or any Kafka."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from sluice.cli.common import (
    DEFAULT_BOOTSTRAP,
    Bootstrap,
    ClientSecurity,
    Settings,
    console,
    fail,
    serving,
    with_client_security,
)
from sluice.cli.users import TIMEOUT_S, admin

app = typer.Typer(help="Add, list and remove ACLs.", no_args_is_help=True)

Topic = Annotated[
    str | None, typer.Option("--topic", help="Topic name (or prefix with --prefixed; '*' for all).")
]
Group = Annotated[str | None, typer.Option("--group", help="Consumer group id.")]
TxnId = Annotated[str | None, typer.Option("--transactional-id", help="Transactional id.")]
Cluster = Annotated[bool, typer.Option("--cluster", help="The cluster resource.")]
Prefixed = Annotated[bool, typer.Option("--prefixed", help="The name is a prefix (PREFIXED pattern).")]
Principal = Annotated[
    str | None, typer.Option("--principal", help="e.g. User:alice ('User:*' for everyone).")
]
Operation = Annotated[
    list[str] | None,
    typer.Option(
        "--operation",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
        "DescribeConfigs, AlterConfigs, IdempotentWrite, All (repeatable).",
    ),
]
Host = Annotated[str | None, typer.Option("--host", help="Client host the ACL applies to (default '*').")]
Deny = Annotated[bool, typer.Option("--deny", help="A DENY ACL (deny wins over allow).")]


def _enum_name(value: str) -> str:
    """`DescribeConfigs` / `describe-configs` / `DESCRIBE_CONFIGS` -> DESCRIBE_CONFIGS."""
    out = []
    for i, ch in enumerate(value.replace("-", "_")):
        if ch.isupper() and i and value[i - 1].islower():
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


def _resource(
    topic: str | None, group: str | None, txn: str | None, cluster: bool, *, required: bool
) -> tuple[Any, Any]:
    from confluent_kafka.admin import ResourceType

    chosen = [
        (ResourceType.TOPIC, topic),
        (ResourceType.GROUP, group),
        (ResourceType.TRANSACTIONAL_ID, txn),
        (ResourceType.BROKER, "kafka-cluster" if cluster else None),
    ]
    given = [(t, n) for t, n in chosen if n is not None]
    if len(given) > 1:
        fail("name one resource: --topic, --group, --transactional-id or --cluster")
    if not given:
        if required:
            fail("name a resource: --topic, --group, --transactional-id or --cluster")
        return ResourceType.ANY, None
    return given[0]


def _operations(names: list[str] | None, *, required: bool) -> list[Any]:
    from confluent_kafka.admin import AclOperation

    if not names:
        if required:
            fail("name at least one --operation")
        return [AclOperation.ANY]
    ops = []
    for name in names:
        try:
            ops.append(AclOperation[_enum_name(name)])
        except KeyError:
            fail(f"unknown operation {name!r}")
    return ops


@app.command("add")
@with_client_security
def add(
    principal: Principal = None,
    operation: Operation = None,
    topic: Topic = None,
    group: Group = None,
    transactional_id: TxnId = None,
    cluster: Cluster = False,
    prefixed: Prefixed = False,
    host: Host = None,
    deny: Deny = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    security: ClientSecurity = ClientSecurity(),
    setting: Settings = None,
) -> None:
    """Allow (or with --deny, deny) PRINCIPAL the operations on one resource."""
    from confluent_kafka.admin import AclBinding, AclPermissionType, ResourcePatternType

    if principal is None:
        fail("--principal is required (e.g. User:alice)")
    rtype, name = _resource(topic, group, transactional_id, cluster, required=True)
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    permission = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    bindings = [
        AclBinding(rtype, name, pattern, principal, host or "*", op, permission)
        for op in _operations(operation, required=True)
    ]
    client = admin(bootstrap, security, setting)
    for binding, future in client.create_acls(bindings).items():
        try:
            serving(client, future.result, TIMEOUT_S)
        except Exception as exc:
            fail(f"{binding}: {exc}")
    console.print(f"added {len(bindings)} ACL(s)")


def _filter(
    principal: str | None,
    operation: list[str] | None,
    topic: str | None,
    group: str | None,
    txn: str | None,
    cluster: bool,
    prefixed: bool,
    host: str | None,
    deny: bool | None,
) -> list[Any]:
    from confluent_kafka.admin import AclBindingFilter, AclPermissionType, ResourcePatternType

    rtype, name = _resource(topic, group, txn, cluster, required=False)
    pattern = (
        ResourcePatternType.PREFIXED
        if prefixed
        else (ResourcePatternType.LITERAL if name is not None else ResourcePatternType.ANY)
    )
    permission = (
        AclPermissionType.ANY
        if deny is None
        else (AclPermissionType.DENY if deny else AclPermissionType.ALLOW)
    )
    return [
        AclBindingFilter(rtype, name, pattern, principal, host, op, permission)
        for op in _operations(operation, required=False)
    ]


def _row(b: Any) -> dict[str, str]:
    rtype = "CLUSTER" if b.restype.name == "BROKER" else b.restype.name
    return {
        "resource_type": rtype,
        "resource_name": b.name,
        "pattern_type": b.resource_pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission_type.name,
    }


@app.command("list")
@with_client_security
def list_acls(
    principal: Principal = None,
    operation: Operation = None,
    topic: Topic = None,
    group: Group = None,
    transactional_id: TxnId = None,
    cluster: Cluster = False,
    prefixed: Prefixed = False,
    host: Host = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    security: ClientSecurity = ClientSecurity(),
    setting: Settings = None,
) -> None:
    """ACLs matching the options (all of them without any)."""
    client = admin(bootstrap, security, setting)
    rows: list[dict[str, str]] = []
    for f in _filter(principal, operation, topic, group, transactional_id, cluster, prefixed, host, None):
        try:
            rows += [_row(b) for b in serving(client, client.describe_acls(f).result, TIMEOUT_S)]
        except Exception as exc:
            fail(str(exc))
    if as_json:
        console.print_json(json.dumps(rows))
        return
    for r in rows:
        console.print(
            f"{r['permission']}\t{r['principal']}\t{r['operation']}\t{r['resource_type']}:"
            f"{r['pattern_type']}:{r['resource_name']}\thost={r['host']}"
        )


@app.command("remove")
@with_client_security
def remove(
    principal: Principal = None,
    operation: Operation = None,
    topic: Topic = None,
    group: Group = None,
    transactional_id: TxnId = None,
    cluster: Cluster = False,
    prefixed: Prefixed = False,
    host: Host = None,
    deny: Annotated[bool | None, typer.Option("--deny/--allow", help="Only DENY or only ALLOW ACLs.")] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    security: ClientSecurity = ClientSecurity(),
    setting: Settings = None,
) -> None:
    """Remove the ACLs matching the options (at least a principal or a resource must be named)."""
    if principal is None and not (topic or group or transactional_id or cluster):
        fail("name a --principal or a resource, so one command cannot remove every ACL by accident")
    client = admin(bootstrap, security, setting)
    removed = 0
    filters = _filter(principal, operation, topic, group, transactional_id, cluster, prefixed, host, deny)
    for _, future in client.delete_acls(filters).items():
        try:
            removed += len(serving(client, future.result, TIMEOUT_S))
        except Exception as exc:
            fail(str(exc))
    console.print(f"removed {removed} ACL(s)")
