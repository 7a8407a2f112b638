"""ACL bindings, their matching rules and the authorizer (pure: no sockets, no clocks).

The rules are Kafka's (AclAuthorizer / StandardAuthorizer):
- a binding names a resource pattern (type, name, LITERAL or PREFIXED; the literal name `*` matches every
  resource of its type), a principal (`User:*` matches every user), a host (`*` matches every host), an
  operation and ALLOW or DENY;
- a super user is allowed everything;
- a matching DENY wins over any ALLOW;
- ALLOW of Read, Write, Delete or Alter implies Describe, and ALLOW of AlterConfigs implies DescribeConfigs;
  `All` matches every operation (in both ALLOW and DENY);
- a resource that no binding matches at all is allowed only with `allow_everyone_if_no_acl_found`.

Bindings persist in one JSON file replaced atomically, so they survive restarts and crashes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"
# Resource types and operations a binding may name (the others exist only in filters).
BINDABLE_TYPES = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)
BINDABLE_OPERATIONS = frozenset(set(Operation) - {Operation.UNKNOWN, Operation.ANY})

# An ALLOW of any of these operations also allows the key operation.
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {
            Operation.DESCRIBE,
            Operation.READ,
            Operation.WRITE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.ALL,
        }
    ),
    Operation.DESCRIBE_CONFIGS: frozenset(
        {Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.ALL}
    ),
}

# Most bindings the store holds: each is checked on every denied-or-allowed decision it may match.
MAX_BINDINGS = 100_000


class AclError(ValueError):
    """A binding or filter that cannot be stored (bad type, pattern, operation or principal)."""


class StoreDamaged(ValueError):
    """A security file (ACLs, credentials) that cannot be read back. The broker refuses to start rather than
    run with fewer ACLs or users than the operator created; the files are only ever replaced atomically, so
    this means damage from outside."""


def read_store(path: Path, load: Callable[[dict[str, Any]], None]) -> None:
    """Read `path` (JSON) and hand it to `load`; any failure is a StoreDamaged naming the file."""
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        load(raw)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreDamaged(
            f"{path} cannot be read ({exc}); restore it from a backup, or move it away to start without it"
        ) from exc


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> AclBinding:
        return cls(
            ResourceType[raw["resource_type"]],
            raw["resource_name"],
            PatternType[raw["pattern_type"]],
            raw["principal"],
            raw["host"],
            Operation[raw["operation"]],
            Permission[raw["permission"]],
        )


def check_binding(binding: AclBinding) -> None:
    """Refuse what Kafka refuses to store, in its words and order (AclApis, then AclControlManager)."""
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not binding.resource_name:
        raise AclError("Invalid empty resource name")
    if binding.resource_type not in BINDABLE_TYPES:
        raise AclError(f"Invalid resourceType {binding.resource_type.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation not in BINDABLE_OPERATIONS:
        raise AclError(f"Invalid operation {binding.operation.name}")
    if binding.permission not in (Permission.ALLOW, Permission.DENY):
        raise AclError(f"Invalid permissionType {binding.permission.name}")
    if binding.pattern_type == PatternType.PREFIXED and binding.resource_name == WILDCARD:
        raise AclError("a PREFIXED pattern cannot be '*': use LITERAL '*'")
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"expected a string in format principalType:principalName but got {binding.principal}")
    if not binding.host:
        raise AclError("host is empty (use '*' for every host)")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter: None (or ANY) matches everything in that position."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def check(self) -> None:
        # Kafka's AclControlManager.validateFilter words.
        if self.resource_type == 0 or self.pattern_type == 0:
            raise AclError("Unknown patternFilter.")
        if self.operation == 0 or self.permission == 0:
            raise AclError("Unknown entryFilter.")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != Operation.ANY and b.operation != self.operation:
            return False
        if self.permission != Permission.ANY and b.permission != self.permission:
            return False
        if self.pattern_type == PatternType.MATCH:
            # Every binding that would apply to the named resource (Kafka's MATCH semantics).
            if self.resource_name is None:
                return True
            return _pattern_applies(b, self.resource_name)
        if self.pattern_type != PatternType.ANY and b.pattern_type != self.pattern_type:
            return False
        return self.resource_name is None or b.resource_name == self.resource_name


def _pattern_applies(b: AclBinding, name: str) -> bool:
    if b.pattern_type == PatternType.LITERAL:
        return b.resource_name == name or b.resource_name == WILDCARD
    return name.startswith(b.resource_name)


class AclStore:
    """The bindings, indexed by resource type and name so one decision looks at few of them."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._bindings: set[AclBinding] = set()
        # resource type -> literal name -> bindings; resource type -> prefixed bindings
        self._literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        self.version = 0  # bumped on every change, so callers can cache decisions
        if path is not None and path.exists():
            read_store(path, self._load)

    def _load(self, raw: dict[str, Any]) -> None:
        for item in raw.get("bindings", []):
            self._index(AclBinding.from_json(item))

    def __len__(self) -> int:
        return len(self._bindings)

    def bindings(self) -> list[AclBinding]:
        return sorted(self._bindings, key=lambda b: tuple(str(v) for v in b.to_json().values()))

    def _index(self, b: AclBinding) -> None:
        self._bindings.add(b)
        if b.pattern_type == PatternType.LITERAL:
            self._literal.setdefault(b.resource_type, {}).setdefault(b.resource_name, []).append(b)
        else:
            self._prefixed.setdefault(b.resource_type, []).append(b)

    def _reindex(self) -> None:
        bindings, self._bindings = self._bindings, set()
        self._literal, self._prefixed = {}, {}
        for b in bindings:
            self._index(b)

    def _save(self) -> None:
        self.version += 1
        if self.path is None:
            return
        from sluice.storage.files import write_atomically

        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = {"version": 1, "bindings": [b.to_json() for b in self.bindings()]}
        write_atomically(self.path, json.dumps(data, indent=1).encode())

    def add(self, bindings: Iterable[AclBinding]) -> list[str | None]:
        """Store each binding; returns per binding None or why it was refused. One durable write."""
        results: list[str | None] = []
        changed = False
        for b in bindings:
            try:
                check_binding(b)
                if len(self._bindings) >= MAX_BINDINGS and b not in self._bindings:
                    raise AclError(f"the broker holds {MAX_BINDINGS} ACLs already")
            except AclError as exc:
                results.append(str(exc))
                continue
            if b not in self._bindings:
                self._index(b)
                changed = True
            results.append(None)
        if changed:
            self._save()
        return results

    def find(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings() if acl_filter.matches(b)]

    def remove(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; returns the deleted bindings per filter. One durable write."""
        removed: list[list[AclBinding]] = []
        for f in filters:
            gone = self.find(f)
            self._bindings.difference_update(gone)
            removed.append(gone)
        if any(removed):
            self._reindex()
            self._save()
        return removed

    def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding whose pattern covers this resource."""
        found: list[AclBinding] = []
        literal = self._literal.get(resource_type)
        if literal:
            found += literal.get(name, ())
            if name != WILDCARD:
                found += literal.get(WILDCARD, ())
        for b in self._prefixed.get(resource_type, ()):
            if name.startswith(b.resource_name):
                found.append(b)
        return found


def _principal_matches(b: AclBinding, principal: str) -> bool:
    return b.principal == principal or b.principal == WILDCARD_PRINCIPAL


def _host_matches(b: AclBinding, host: str) -> bool:
    return b.host == WILDCARD or b.host == host


class Authorizer:
    """Answers "may `principal` from `host` do `operation` on this resource?", caching the answers until the
    bindings change (a produce request asks once per topic, so this sits on the hot path)."""

    CACHE_LIMIT = 100_000

    def __init__(
        self,
        store: AclStore,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        on_decision: Callable[[str, str, Operation, ResourceType, str, bool], None] | None = None,
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.on_decision = on_decision
        self._cache: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}
        self._cache_version = store.version

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        if self._cache_version != self.store.version:
            self._cache.clear()
            self._cache_version = self.store.version
        key = (principal, host, operation, resource_type, name)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = allowed
        return allowed

    def _decide(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        bindings = self.store.matching(resource_type, name)
        if not bindings:
            return self.allow_everyone_if_no_acl_found
        applicable = [b for b in bindings if _principal_matches(b, principal) and _host_matches(b, host)]
        for b in applicable:
            if b.permission == Permission.DENY and (b.operation == operation or b.operation == Operation.ALL):
                return False
        allowing = IMPLIED_BY.get(operation, frozenset({operation, Operation.ALL}))
        return any(b.permission == Permission.ALLOW and b.operation in allowing for b in applicable)

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Is some resource of this type (possibly one not yet existing) allowed? Kafka's authorizeByResourceType:
        true when an ALLOW binding applies and no DENY covers every name it could allow."""
        if principal in self.super_users:
            return True
        allowing = IMPLIED_BY.get(operation, frozenset({operation, Operation.ALL}))
        relevant = [
            b
            for b in self.store.bindings()
            if b.resource_type == resource_type
            and _principal_matches(b, principal)
            and _host_matches(b, host)
        ]
        denied_all = any(
            b.permission == Permission.DENY
            and b.resource_name == WILDCARD
            and b.pattern_type == PatternType.LITERAL
            and b.operation in (operation, Operation.ALL)
            for b in relevant
        )
        if denied_all:
            return False
        return any(b.permission == Permission.ALLOW and b.operation in allowing for b in relevant)
