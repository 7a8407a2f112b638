"""The admin side of the REST Proxy: cluster metadata, topics, their configs and offsets.

One confluent-kafka AdminClient per gateway cluster; every blocking call runs in a worker thread and every
Kafka error becomes a `RestError` with Confluent's code (40401 unknown topic, 50002 anything else).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from ..config import ClusterConfig
from .errors import (
    PARTITION_NOT_FOUND,
    TOPIC_NOT_FOUND,
    RestError,
    bad_request,
    kafka_error,
    not_found,
)

ADMIN_TIMEOUT_SECONDS = 10.0
TOPIC_CACHE_SECONDS = 5.0
T = TypeVar("T")

_UNKNOWN_TOPIC_CODES = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
_BAD_REQUEST_CODES = {
    # Confluent answers an existing topic 400 (its KafkaExceptionMapper's TopicExistsException), not 409.
    KafkaError.TOPIC_ALREADY_EXISTS: 400,
    KafkaError.INVALID_PARTITIONS: 400,
    KafkaError.INVALID_REPLICATION_FACTOR: 400,
    KafkaError.INVALID_CONFIG: 400,
    KafkaError.TOPIC_EXCEPTION: 400,
    KafkaError.INVALID_REQUEST: 400,
    KafkaError.POLICY_VIOLATION: 400,
    KafkaError.SECURITY_DISABLED: 400,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: 403,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: 403,
    KafkaError.GROUP_AUTHORIZATION_FAILED: 403,
    KafkaError.GROUP_ID_NOT_FOUND: 404,
    KafkaError.INVALID_RECORD: 400,
    KafkaError._INVALID_ARG: 400,  # librdkafka refused the request's arguments before sending it
    KafkaError.UNKNOWN_MEMBER_ID: 404,
}


def rest_error_of(exc: BaseException, what: str) -> RestError:
    if isinstance(exc, RestError):
        return exc
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(error, KafkaError):
        code = error.code()
        if code in _UNKNOWN_TOPIC_CODES:
            return not_found(TOPIC_NOT_FOUND, f"{what}: topic not found")
        status = _BAD_REQUEST_CODES.get(code)
        if status is not None:
            return RestError(status, status * 100 + 1, f"{what}: {error.str()}")
        return kafka_error(f"{what}: {error.str()}")
    if isinstance(exc, ValueError | TypeError | OverflowError):  # the client refused the arguments
        return bad_request(f"{what}: {exc}")
    return kafka_error(f"{what}: {exc}")


@dataclass(frozen=True)
class Partition:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: tuple[Partition, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str | None
    is_default: bool
    is_read_only: bool
    is_sensitive: bool
    source: str
    synonyms: tuple[tuple[str, str | None, str], ...] = ()


class RestAdmin:
    def __init__(self, cluster: ClusterConfig, client_id: str) -> None:
        self.cluster = cluster
        self.client = AdminClient({**cluster.client_config(), "client.id": f"{client_id}-rest"})
        self._cluster_id: str | None = None
        # Topics seen lately: every produce checks its topic exists, and asking the cluster each time would
        # cost a metadata round trip per request. Deleting through this gateway forgets the topic at once.
        self._known_topics: dict[str, tuple[Topic, float]] = {}

    async def call(self, what: str, work: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(work)
        except (KafkaException, concurrent.futures.TimeoutError, ValueError, TypeError, OverflowError) as exc:
            raise rest_error_of(exc, what) from None

    # -- cluster ----------------------------------------------------------------
    async def describe_cluster(self) -> tuple[str, int, list[tuple[int, str, int]]]:
        """(cluster id, controller id, [(broker id, host, port)])."""

        def describe() -> tuple[str, int, list[tuple[int, str, int]]]:
            found = self.client.describe_cluster(request_timeout=ADMIN_TIMEOUT_SECONDS).result()
            controller = found.controller.id if found.controller is not None else -1
            brokers = sorted((node.id, node.host, node.port) for node in found.nodes)
            return found.cluster_id or "sluice", controller, brokers

        described = await self.call("describe cluster", describe)
        self._cluster_id = described[0]
        return described

    async def cluster_id(self) -> str:
        if self._cluster_id is None:
            await self.describe_cluster()
        assert self._cluster_id is not None
        return self._cluster_id

    # -- topics -------------------------------------------------------------------
    async def topics(self, *, internal: bool = False) -> dict[str, Topic]:
        metadata = await self.call(
            "list topics", lambda: self.client.list_topics(timeout=ADMIN_TIMEOUT_SECONDS)
        )
        return {
            name: _topic_of(name, found)
            for name, found in sorted(metadata.topics.items())
            if found.error is None and (internal or not name.startswith("__"))
        }

    async def topic(self, name: str) -> Topic:
        cached = self._known_topics.get(name)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        # All topics rather than this one: naming it would make a broker that auto-creates topics create it.
        found = (await self.topics(internal=True)).get(name)
        if found is None or not found.partitions:
            raise not_found(TOPIC_NOT_FOUND, f"Topic {name} not found.")
        self._known_topics[name] = (found, time.monotonic() + TOPIC_CACHE_SECONDS)
        return found

    def forget_topic(self, name: str) -> None:
        """Ask the cluster, not the cache, the next time `name` is looked up."""
        self._known_topics.pop(name, None)

    async def partition(self, topic: str, partition: int) -> Partition:
        for candidate in (await self.topic(topic)).partitions:
            if candidate.partition == partition:
                return candidate
        raise not_found(PARTITION_NOT_FOUND, f"Partition {partition} of topic {topic} not found.")

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        validate_only: bool = False,
    ) -> None:
        def create() -> None:
            new = NewTopic(
                name, num_partitions=partitions, replication_factor=replication_factor, config=configs
            )
            futures = self.client.create_topics(
                [new], request_timeout=ADMIN_TIMEOUT_SECONDS, validate_only=validate_only
            )
            futures[name].result()

        await self.call(f"create topic {name}", create)

    async def delete_topic(self, name: str) -> None:
        await self.topic(name)
        self._known_topics.pop(name, None)

        def delete() -> None:
            self.client.delete_topics([name], request_timeout=ADMIN_TIMEOUT_SECONDS)[name].result()

        await self.call(f"delete topic {name}", delete)

    async def create_partitions(self, name: str, count: int) -> None:
        """Raise the topic's partition count to `count` (Kafka refuses to lower it: INVALID_PARTITIONS)."""
        await self.topic(name)
        self._known_topics.pop(name, None)

        def create() -> None:
            futures = self.client.create_partitions(
                [NewPartitions(name, count)], request_timeout=ADMIN_TIMEOUT_SECONDS
            )
            futures[name].result()

        await self.call(f"add partitions to {name}", create)

    # -- configs -------------------------------------------------------------------
    async def topic_configs(self, name: str) -> list[ConfigValue]:
        await self.topic(name)
        return await self.configs(ConfigResource.Type.TOPIC, name)

    async def configs(self, kind: ConfigResource.Type, name: str) -> list[ConfigValue]:
        """The configs of a topic, a broker (its id) or the cluster's dynamic broker defaults (name "")."""
        resource = ConfigResource(kind, name)

        def describe() -> list[ConfigValue]:
            entries = self.client.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_SECONDS)
            found = entries[resource].result()
            return [
                ConfigValue(
                    entry.name,
                    None if entry.is_sensitive else entry.value,
                    bool(entry.is_default),
                    bool(entry.is_read_only),
                    bool(entry.is_sensitive),
                    _source_name(entry.source),
                    tuple(
                        (
                            synonym.name,
                            None if entry.is_sensitive else synonym.value,
                            _source_name(synonym.source),
                        )
                        for synonym in (entry.synonyms or {}).values()
                    ),
                )
                for entry in sorted(found.values(), key=lambda e: e.name)
            ]

        return await self.call(f"configs of {kind.name.lower()} {name}", describe)

    async def alter_configs(
        self,
        kind: ConfigResource.Type,
        name: str,
        changes: list[tuple[str, str | None]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Set (name, value) or delete (name, None) configs in one incremental request."""
        entries = [
            ConfigEntry(
                key,
                value,
                incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET,
            )
            for key, value in changes
        ]
        resource = ConfigResource(kind, name, incremental_configs=entries)

        def alter() -> None:
            self.client.incremental_alter_configs(
                [resource], request_timeout=ADMIN_TIMEOUT_SECONDS, validate_only=validate_only
            )[resource].result()

        await self.call(f"alter configs of {kind.name.lower()} {name}", alter)

    # -- offsets -------------------------------------------------------------------
    async def watermarks(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(beginning, end) offsets of each (topic, partition)."""
        if not partitions:
            return {}

        def list_offsets() -> dict[tuple[str, int], tuple[int, int]]:
            found: dict[tuple[str, int], list[int]] = {}
            for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
                asked = {TopicPartition(t, p): spec for t, p in partitions}
                futures = self.client.list_offsets(asked, request_timeout=ADMIN_TIMEOUT_SECONDS)
                for tp, future in futures.items():
                    found.setdefault((tp.topic, tp.partition), []).append(future.result().offset)
            return {key: (low, high) for key, (low, high) in found.items()}

        return await self.call("list offsets", list_offsets)

    async def end_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The read_committed end offset of each of `partitions` that exists; the others are left out (a group
        may hold offsets of a partition since deleted: Kafka's tools show no end offset for it)."""
        existing = {
            (t.name, p.partition) for t in (await self.topics(internal=True)).values() for p in t.partitions
        }
        present = [tp for tp in partitions if tp in existing]
        if not present:
            return {}

        def list_offsets() -> dict[tuple[str, int], int]:
            asked = {TopicPartition(t, p): OffsetSpec.latest() for t, p in present}
            futures = self.client.list_offsets(
                asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=ADMIN_TIMEOUT_SECONDS
            )
            found: dict[tuple[str, int], int] = {}
            for tp, future in futures.items():
                try:
                    found[(tp.topic, tp.partition)] = future.result().offset
                except KafkaException as exc:  # gone since the metadata was read: as if it were not there
                    if exc.args[0].code() not in _UNKNOWN_TOPIC_CODES:
                        raise
            return found

        return await self.call("list offsets", list_offsets)


def _source_name(source: Any) -> str:
    if isinstance(source, int):
        try:
            return ConfigSource(source).name
        except ValueError:
            return "UNKNOWN"
    return str(getattr(source, "name", source))


def _topic_of(name: str, found: Any) -> Topic:
    return Topic(
        name,
        tuple(
            Partition(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
            for p in sorted(found.partitions.values(), key=lambda p: p.id)
        ),
    )


def parse_configs(document: Any, where: str) -> dict[str, str]:
    """[{"name": ..., "value": ...}] as v3 bodies carry topic configs."""
    if document is None:
        return {}
    if not isinstance(document, list):
        raise bad_request(f"{where} must be a list of {{name, value}}")
    configs: dict[str, str] = {}
    for index, entry in enumerate(document):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise bad_request(f"{where}[{index}] must be an object with a name")
        value = entry.get("value")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise bad_request(f"{where}[{index}].value must be a string")
        configs[entry["name"]] = (
            "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        )
    return configs
