"""What the REST admin asks a cluster over sluice's own wire client, where confluent-kafka cannot:
ongoing partition reassignments (ListPartitionReassignments), and the cluster-wide dynamic broker defaults,
Kafka's BROKER config resource with the empty name, which librdkafka refuses to name.

A connection is made per call, as librdkafka would make it with the cluster's settings (TLS, SASL PLAIN or
SCRAM: `sluice.client.secure`); a cluster that needs OAUTHBEARER or GSSAPI gets 501 for these resources.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ...client import secure
from ...client.wire import WireClient
from ...errors import ErrorCode
from .admin import ADMIN_TIMEOUT_SECONDS, ConfigValue, RestAdmin
from .errors import KAFKA_ERROR, KAFKA_RETRIABLE_ERROR, RestError

T = TypeVar("T")
BROKER_RESOURCE = 4
# Kafka's ConfigSource ids (DescribeConfigs v1+), by the names v3 answers with.
_SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
# Errors a request's own content causes: 400 (the rest are the cluster's: 500).
_CALLERS_ERRORS = {
    ErrorCode.INVALID_CONFIG,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.POLICY_VIOLATION,
    ErrorCode.UNSUPPORTED_VERSION,
}


@dataclass(frozen=True, order=True)
class Reassignment:
    topic: str
    partition: int
    adding: tuple[int, ...]
    removing: tuple[int, ...]


async def _ask(admin: RestAdmin, what: str, work: Callable[[WireClient], T]) -> T:
    """`work` on a connection to the cluster's controller (any broker forwards what it must)."""
    _, controller, brokers = await admin.describe_cluster()
    address = next(((h, p) for node, h, p in brokers if node == controller), None)
    if address is None and brokers:
        address = brokers[0][1:]
    if address is None:
        raise RestError(503, KAFKA_RETRIABLE_ERROR, f"{what}: the cluster has no broker to ask")
    settings = {key: str(value) for key, value in admin.cluster.client_config().items()}
    reason = secure.unsupported_reason(settings)
    if reason is not None:
        raise RestError(501, 501, f"{what} is not served for this cluster: {reason}")

    def call() -> T:
        with secure.connect_secure(
            *address, settings, ADMIN_TIMEOUT_SECONDS, client_id="sluice-rest"
        ) as wire:
            return work(wire)

    try:
        return await asyncio.to_thread(call)
    except (OSError, secure.SecureConnectError) as exc:
        raise RestError(503, KAFKA_RETRIABLE_ERROR, f"{what}: the cluster cannot be asked: {exc}") from None


def _check(what: str, error_code: int, message: str | None) -> None:
    if not error_code:
        return
    try:
        code: ErrorCode | int = ErrorCode(error_code)
    except ValueError:  # a code newer than sluice's table
        code = error_code
    text = f"{what}: {getattr(code, 'name', code)}{': ' + message if message else ''}"
    if code in _CALLERS_ERRORS:
        raise RestError(400, 400, text)
    raise RestError(500, KAFKA_ERROR, text)


async def reassignments(admin: RestAdmin) -> list[Reassignment]:
    """The cluster's ongoing partition reassignments, by topic and partition."""

    def ask(wire: WireClient) -> list[Reassignment]:
        request = wire.request_class("ListPartitionReassignments")(
            timeout_ms=int(ADMIN_TIMEOUT_SECONDS * 1000), topics=None
        )
        reply = wire.call("ListPartitionReassignments", 0, request)
        _check("list reassignments", reply.error_code, reply.error_message)
        return sorted(
            Reassignment(
                topic.name,
                part.partition_id,
                tuple(b for b in part.target_brokers if b not in part.current_brokers),
                tuple(b for b in part.current_brokers if b not in part.target_brokers),
            )
            for topic in reply.topics
            for part in topic.partitions
        )

    return await _ask(admin, "list reassignments", ask)


async def cluster_configs(admin: RestAdmin) -> list[ConfigValue]:
    """The dynamic broker configs set for the whole cluster (DescribeConfigs of BROKER "")."""

    def ask(wire: WireClient) -> list[ConfigValue]:
        cls = wire.request_class("DescribeConfigs")
        resource = cls.DescribeConfigsResource(
            resource_type=BROKER_RESOURCE, resource_name="", configuration_keys=None
        )
        reply = wire.call("DescribeConfigs", 4, cls(resources=[resource], include_synonyms=True))
        (result,) = reply.results
        _check("describe cluster configs", result.error_code, result.error_message)
        return [_config_value(entry) for entry in sorted(result.configs, key=lambda e: e.name)]

    return await _ask(admin, "cluster configs", ask)


def _config_value(entry: Any) -> ConfigValue:
    hidden = bool(entry.is_sensitive)
    return ConfigValue(
        entry.name,
        None if hidden else entry.value,
        entry.config_source == 5,
        bool(entry.read_only),
        hidden,
        _SOURCES.get(entry.config_source, "UNKNOWN"),
        tuple(
            (s.name, None if hidden else s.value, _SOURCES.get(s.source, "UNKNOWN"))
            for s in entry.synonyms or []
        ),
    )


async def alter_cluster_configs(
    admin: RestAdmin, changes: list[tuple[str, str | None]], *, validate_only: bool = False
) -> None:
    """Set (name, value) or delete (name, None) cluster-wide broker configs in one IncrementalAlterConfigs."""

    def ask(wire: WireClient) -> None:
        cls = wire.request_class("IncrementalAlterConfigs")
        entries = [
            cls.AlterableConfig(name=name, config_operation=0 if value is not None else 1, value=value)
            for name, value in changes
        ]
        resource = cls.AlterConfigsResource(resource_type=BROKER_RESOURCE, resource_name="", configs=entries)
        reply = wire.call(
            "IncrementalAlterConfigs", 1, cls(resources=[resource], validate_only=validate_only)
        )
        (result,) = reply.responses
        _check("alter cluster configs", result.error_code, result.error_message)

    await _ask(admin, "alter cluster configs", ask)
