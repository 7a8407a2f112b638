"""What the console asks of a cluster, through confluent-kafka only, so it works against any Kafka:
the clients, cluster and topic calls here; messages in :mod:`sluice.console.messages`, consumer groups in
:mod:`sluice.console.groups`.

Every call blocks (librdkafka futures, consumer polls) and is meant to run in a thread executor;
each one bounds its waiting with `timeout_s`. Failures surface as :class:`ClusterError` carrying Kafka's
error name and message, which the pages show as they are.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as ConcurrentTimeout
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
)

POLICY_CACHE_S = 30.0


class ClusterError(Exception):
    """A failed cluster call: Kafka's error name (e.g. TOPIC_ALREADY_EXISTS) and its message."""

    def __init__(self, name: str, message: str, *, unreachable: bool = False) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message
        self.unreachable = unreachable


_UNREACHABLE = {"_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_DESTROY", "_WAIT_COORD"}


def as_cluster_error(exc: BaseException) -> ClusterError:
    if isinstance(exc, ClusterError):
        return exc
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(error, KafkaError):
        name = error.name()
        return ClusterError(name, error.str(), unreachable=name in _UNREACHABLE)
    if isinstance(exc, TimeoutError | ConcurrentTimeout):
        return ClusterError("_TIMED_OUT", "the cluster did not answer in time", unreachable=True)
    return ClusterError(type(exc).__name__, str(exc))


@dataclass
class TopicRow:
    name: str
    partitions: int
    messages: int | None
    size_bytes: int | None
    cleanup_policy: str | None
    internal: bool


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    start: int | None
    end: int | None
    size_bytes: int | None = None

    @property
    def messages(self) -> int | None:
        return None if self.start is None or self.end is None else self.end - self.start


@dataclass
class ConfigRow:
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    sensitive: bool


class Cluster:
    """One cluster's clients: an AdminClient, a lazily made Producer, and a small pool of assign-only
    Consumers (they never subscribe, so they never join a group)."""

    def __init__(self, settings: dict[str, str], *, timeout_s: float = 10.0, consumers: int = 4) -> None:
        self.settings = dict(settings)
        self.bootstrap = self.settings.get("bootstrap.servers", "")
        self.timeout_s = timeout_s
        # librdkafka fails a call with a bare _TRANSPORT when the reason (a refused login, a TLS handshake)
        # went to its error callback earlier: kept here, so the page can name the reason.
        self._client_errors: collections.deque[tuple[float, str, str]] = collections.deque(maxlen=16)
        self.admin = AdminClient(
            {**self.settings, "socket.timeout.ms": int(timeout_s * 1000), "error_cb": self._on_client_error}
        )
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()
        self._consumers: queue.LifoQueue[Consumer] = queue.LifoQueue()
        self._made = 0
        self._max_consumers = consumers
        self._made_lock = threading.Lock()
        self._policies: dict[str, str | None] = {}
        self._policies_at = float("-inf")

    def _on_client_error(self, error: KafkaError) -> None:
        self._client_errors.append((time.monotonic(), error.name(), error.str()))

    def explain(self, error: ClusterError) -> ClusterError:
        """An unreachable cluster's error, with the latest reason librdkafka gave for it (last minute)."""
        if not error.unreachable or self.admin is None:
            return error
        with contextlib.suppress(Exception):
            self.admin.poll(0)  # serves the queued error callbacks
        now = time.monotonic()
        recent = [(n, m) for at, n, m in self._client_errors if now - at < 60 and n != "_ALL_BROKERS_DOWN"]
        if not recent:
            return error
        name, message = recent[-1]
        return ClusterError(name, f"{message} (then: {error.message})", unreachable=True)

    def close(self) -> None:
        while True:
            try:
                self._consumers.get_nowait().close()
            except queue.Empty:
                break
        if self._producer is not None:
            self._producer.flush(1)
        # confluent-kafka's clients have no close(): dropping the last reference destroys the handle, so a
        # stopped console stops reconnecting to a cluster that may be gone.
        self._producer = None
        self.admin = None  # type: ignore[assignment]

    # ----- clients -----

    def new_consumer(self, **extra: Any) -> Consumer:
        return Consumer(
            {
                **self.settings,
                "group.id": "sluice-console",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                # The browser reads bounded ranges; a long fetch wait would only add latency at the end.
                "fetch.wait.max.ms": 20,
                "socket.timeout.ms": int(self.timeout_s * 1000),
                **extra,
            }
        )

    @contextlib.contextmanager
    def consumer(self) -> Iterator[Consumer]:
        try:
            consumer = self._consumers.get_nowait()
        except queue.Empty:
            with self._made_lock:
                can_make = self._made < self._max_consumers
                if can_make:
                    self._made += 1
            consumer = self.new_consumer() if can_make else self._consumers.get(timeout=self.timeout_s)
        try:
            yield consumer
        finally:
            with contextlib.suppress(KafkaException):
                consumer.unassign()
            self._consumers.put(consumer)

    def producer(self) -> Producer:
        with self._producer_lock:
            if self._producer is None:
                self._producer = Producer({**self.settings, "linger.ms": 0, "message.timeout.ms": 15000})
            return self._producer

    def _result(self, future: Any) -> Any:
        try:
            return future.result(timeout=self.timeout_s)
        except Exception as exc:
            raise as_cluster_error(exc) from None

    # ----- cluster -----

    def metadata(self) -> Any:
        self.admin.poll(0)  # drains error callbacks, so only recent ones explain a failure
        try:
            return self.admin.list_topics(timeout=self.timeout_s)
        except Exception as exc:
            raise as_cluster_error(exc) from None

    def describe_cluster(self) -> dict[str, Any]:
        described = self._result(self.admin.describe_cluster(request_timeout=self.timeout_s))
        controller = described.controller.id if described.controller is not None else None
        return {
            "cluster_id": described.cluster_id,
            "controller": controller,
            "brokers": sorted(
                ({"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in described.nodes),
                key=lambda b: b["id"],
            ),
        }

    def watermarks(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(start, end) offsets of many partitions in two ListOffsets round trips, not one per partition."""
        return self._collect_watermarks(self._ask_watermarks(partitions))

    def _ask_watermarks(self, partitions: list[tuple[str, int]]) -> dict[str, dict[Any, Any]]:
        """Send both ListOffsets requests at once (the AdminClient is asynchronous); collect them later."""
        if not partitions:
            return {}
        return {
            label: self.admin.list_offsets(
                {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=self.timeout_s
            )
            for label, spec in (("start", OffsetSpec.earliest()), ("end", OffsetSpec.latest()))
        }

    def _collect_watermarks(self, asked: dict[str, dict[Any, Any]]) -> dict[tuple[str, int], tuple[int, int]]:
        found: dict[str, dict[tuple[str, int], int]] = {"start": {}, "end": {}}
        for label, futures in asked.items():
            for tp, future in futures.items():
                try:
                    found[label][(tp.topic, tp.partition)] = future.result(timeout=self.timeout_s).offset
                except Exception as exc:
                    error = as_cluster_error(exc)
                    if error.unreachable:
                        raise error from None
        return {
            key: (start, found["end"][key]) for key, start in found["start"].items() if key in found["end"]
        }

    def topic_configs(self, names: list[str]) -> dict[str, list[ConfigRow]]:
        return self._collect_configs(self._ask_configs(names))

    def _ask_configs(self, names: list[str]) -> dict[Any, Any]:
        if not names:
            return {}
        return self.admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names], request_timeout=self.timeout_s
        )

    def _collect_configs(self, futures: dict[Any, Any]) -> dict[str, list[ConfigRow]]:
        configs: dict[str, list[ConfigRow]] = {}
        for resource, future in futures.items():
            try:
                entries = future.result(timeout=self.timeout_s)
            except Exception as exc:
                error = as_cluster_error(exc)
                if error.unreachable:
                    raise error from None
                continue  # a topic deleted meanwhile, or a cluster without DescribeConfigs: shown as "-"
            configs[resource.name] = sorted(
                (
                    ConfigRow(
                        name=e.name,
                        value=e.value,
                        source=_source_name(e.source),
                        is_default=bool(e.is_default),
                        read_only=bool(e.is_read_only),
                        sensitive=bool(e.is_sensitive),
                    )
                    for e in entries.values()
                ),
                key=lambda row: row.name,
            )
        return configs

    # ----- topics -----

    def topics(
        self, log_sizes: Callable[[Any], dict[tuple[str, int], int] | None] | None = None
    ) -> list[TopicRow]:
        metadata = self.metadata()
        described = {name: t for name, t in metadata.topics.items() if t.error is None}
        keys = [(name, p) for name, t in described.items() for p in t.partitions]
        # Offsets and settings are asked at once and the local sizes read meanwhile: one wait, not three.
        asked_marks = self._ask_watermarks(keys)
        # Settings rarely change and cost the broker most (DescribeConfigs of every topic): cached briefly,
        # and dropped by every write this console makes.
        fresh = time.monotonic() - self._policies_at < POLICY_CACHE_S
        missing = sorted(n for n in described if not fresh or n not in self._policies)
        asked_configs = self._ask_configs(missing)
        sizes = log_sizes(metadata) if log_sizes is not None else None
        marks = self._collect_watermarks(asked_marks)
        if missing:
            if not fresh:
                self._policies = {}
                self._policies_at = time.monotonic()
            for name, rows in self._collect_configs(asked_configs).items():
                self._policies[name] = next((c.value for c in rows if c.name == "cleanup.policy"), None)
        rows = []
        for name, t in sorted(described.items()):
            parts = [marks.get((name, p)) for p in t.partitions]
            messages = sum(m[1] - m[0] for m in parts if m) if all(parts) else None
            policy = self._policies.get(name)
            size = sum(sizes.get((name, p), 0) for p in t.partitions) if sizes is not None else None
            rows.append(TopicRow(name, len(t.partitions), messages, size, policy, name.startswith("__")))
        return rows

    def topic(self, name: str, log_sizes: dict[tuple[str, int], int] | None = None) -> list[PartitionRow]:
        # All topics, not list_topics(topic=name): asking for one by name may auto-create it.
        described = self.metadata().topics.get(name)
        if described is None:
            raise ClusterError("UNKNOWN_TOPIC_OR_PART", f"topic {name!r} does not exist")
        if described.error is not None:
            raise ClusterError(described.error.name(), described.error.str())
        marks = self.watermarks([(name, p) for p in described.partitions])
        rows = []
        for p, meta in sorted(described.partitions.items()):
            start, end = marks.get((name, p), (None, None))
            size = log_sizes.get((name, p)) if log_sizes is not None else None
            rows.append(PartitionRow(p, meta.leader, list(meta.replicas), start, end, size))
        return rows

    def create_topic(self, name: str, partitions: int, replication: int, config: dict[str, str]) -> None:
        self._policies_at = float("-inf")
        new = NewTopic(name, num_partitions=partitions, replication_factor=replication, config=config)
        self._result(self.admin.create_topics([new], request_timeout=self.timeout_s)[name])

    def delete_topic(self, name: str) -> None:
        self._policies_at = float("-inf")
        self._result(self.admin.delete_topics([name], request_timeout=self.timeout_s)[name])

    def alter_topic_config(self, name: str, key: str, value: str | None) -> None:
        """Set one setting (IncrementalAlterConfigs SET), or restore its default when value is None."""
        self._policies_at = float("-inf")
        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        entry = ConfigEntry(key, value, incremental_operation=op)
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[entry])
        futures = self.admin.incremental_alter_configs([resource], request_timeout=self.timeout_s)
        for future in futures.values():
            self._result(future)

    # ----- messages -----

    # ----- groups -----


_SOURCES = {
    "DEFAULT_CONFIG": "default",
    "DYNAMIC_TOPIC_CONFIG": "topic",
    "DYNAMIC_BROKER_CONFIG": "broker (dynamic)",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "cluster default",
    "STATIC_BROKER_CONFIG": "broker (static)",
    "GROUP_CONFIG": "group",
}


def _source_name(source: Any) -> str:
    """librdkafka hands the source as a plain int; the page says where the value comes from in words."""
    if source is None:
        return ""
    try:
        name = ConfigSource(int(source)).name
    except (ValueError, TypeError):
        name = getattr(source, "name", str(source))
    return _SOURCES.get(name, name.replace("_", " ").lower())
