"""Users (SCRAM credentials, KIP-554) and ACLs through Kafka's own admin APIs, so the page works on any
cluster that serves them (sluice with security on, Apache Kafka) and names the error on one that does not."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from sluice.console.cluster import Cluster, ClusterError, as_cluster_error

# confluent-kafka names the cluster resource BROKER.
RESOURCE_TYPES = ["TOPIC", "GROUP", "BROKER", "TRANSACTIONAL_ID"]
OPERATIONS = [
    "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
]  # fmt: skip
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
MIN_ITERATIONS = 4096  # Kafka's floor for SCRAM iterations
MAX_ITERATIONS = 16384  # and its ceiling


@dataclass
class UserRow:
    name: str
    mechanisms: list[tuple[str, int]]  # (mechanism, iterations)


@dataclass
class AclRow:
    principal: str
    host: str
    resource_type: str
    pattern_type: str
    resource_name: str
    operation: str
    permission: str


def _name(value: object) -> str:
    return getattr(value, "name", str(value))


def users(cluster: Cluster) -> list[UserRow]:
    described = cluster._result(
        cluster.admin.describe_user_scram_credentials(request_timeout=cluster.timeout_s)
    )
    rows = []
    for name, description in sorted(described.items()):
        infos = getattr(description, "scram_credential_infos", []) or []
        rows.append(UserRow(name, [(_name(i.mechanism).replace("_", "-"), int(i.iterations)) for i in infos]))
    return rows


def upsert_user(cluster: Cluster, name: str, mechanism: str, password: str, iterations: int) -> None:
    if mechanism not in MECHANISMS:
        raise ClusterError("INVALID_REQUEST", f"mechanism must be one of {', '.join(MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ClusterError("INVALID_REQUEST", f"iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}")
    info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], iterations)
    # A fresh random salt per credential, as Kafka's own tools make one.
    change = UserScramCredentialUpsertion(name, info, password.encode(), secrets.token_bytes(32))
    for future in cluster.admin.alter_user_scram_credentials(
        [change], request_timeout=cluster.timeout_s
    ).values():
        cluster._result(future)


def delete_user(cluster: Cluster, name: str, mechanism: str) -> None:
    if mechanism not in MECHANISMS:
        raise ClusterError("INVALID_REQUEST", f"mechanism must be one of {', '.join(MECHANISMS)}")
    change = UserScramCredentialDeletion(name, ScramMechanism[mechanism.replace("-", "_")])
    for future in cluster.admin.alter_user_scram_credentials(
        [change], request_timeout=cluster.timeout_s
    ).values():
        cluster._result(future)


def acls(cluster: Cluster) -> list[AclRow]:
    every = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    bindings = cluster._result(cluster.admin.describe_acls(every, request_timeout=cluster.timeout_s))
    return sorted(
        (
            AclRow(
                principal=b.principal,
                host=b.host,
                resource_type=_name(b.restype),
                pattern_type=_name(b.resource_pattern_type),
                resource_name=b.name,
                operation=_name(b.operation),
                permission=_name(b.permission_type),
            )
            for b in bindings
        ),
        key=lambda r: (r.principal, r.resource_type, r.resource_name, r.operation),
    )


def binding(row: AclRow, kind: type = AclBinding) -> AclBinding:
    """The binding (or, with kind=AclBindingFilter, the exact filter) a row stands for."""
    try:
        return kind(
            ResourceType[row.resource_type],
            row.resource_name,
            ResourcePatternType[row.pattern_type],
            row.principal,
            row.host,
            AclOperation[row.operation],
            AclPermissionType[row.permission],
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise ClusterError("INVALID_REQUEST", f"not a valid ACL: {exc}") from None


def create_acl(cluster: Cluster, row: AclRow) -> None:
    if not row.principal.startswith("User:") or len(row.principal) <= len("User:"):
        raise ClusterError("INVALID_REQUEST", "a principal is written User:NAME")
    for future in cluster.admin.create_acls([binding(row)], request_timeout=cluster.timeout_s).values():
        cluster._result(future)


def delete_acl(cluster: Cluster, row: AclRow) -> int:
    """Delete exactly this binding; returns how many the cluster removed."""
    exact = binding(row, AclBindingFilter)
    try:
        futures = cluster.admin.delete_acls([exact], request_timeout=cluster.timeout_s)
        return sum(len(cluster._result(f)) for f in futures.values())
    except ClusterError:
        raise
    except Exception as exc:
        raise as_cluster_error(exc) from None
