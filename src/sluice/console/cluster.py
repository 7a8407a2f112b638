"""What the console asks of a cluster, through confluent-kafka only, so it works against any Kafka.

Every method here blocks (librdkafka futures, consumer polls) and is meant to run in a thread executor;
each one bounds its waiting with `timeout_s`. Failures surface as :class:`ClusterError` carrying Kafka's
error name and message, which the pages show as they are.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as ConcurrentTimeout
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
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

# librdkafka's enum names, spelled as Kafka prints group states.
_STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "UNKNOWN": "Unknown",
    "UNKOWN": "Unknown",
}
# A reset while members consume would be overwritten by their next commit, so Kafka refuses it.
RESETTABLE_STATES = {"Empty", "Dead"}
MAX_BROWSE_LIMIT = 500
MAX_PRODUCE_BYTES = 1024 * 1024
POLICY_CACHE_S = 30.0
SCAN_ABANDONED_S = 30.0


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


def state_name(state: Any) -> str:
    name = getattr(state, "name", None) or str(state)
    return _STATE_NAMES.get(name, name)


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


@dataclass
class Message:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class Page:
    messages: list[Message]
    # partition -> next position: an exclusive upper bound when browsing newest-first, else the next start.
    next_cursor: dict[int, int] | None


@dataclass
class GroupRow:
    group_id: str
    state: str
    protocol: str
    type: str
    members: int
    lag: int | None


@dataclass
class GroupOffsetRow:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    member: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end is None:
            return None
        return max(self.end - self.committed, 0)


@dataclass
class GroupDetail:
    group_id: str
    state: str
    protocol: str
    type: str
    coordinator: str | None
    members: list[dict[str, Any]]
    offsets: list[GroupOffsetRow]

    @property
    def lag(self) -> int | None:
        lags = [row.lag for row in self.offsets if row.lag is not None]
        return sum(lags) if lags else None


@dataclass
class ResetRow:
    topic: str
    partition: int
    current: int | None
    new: int
    start: int
    end: int

    @property
    def delta(self) -> int | None:
        return None if self.current is None else self.new - self.current


@dataclass
class ScanJob:
    """A server-side filter scan; the page polls it for progress."""

    id: str
    topic: str
    needle: str
    total: int
    scanned: int = 0
    matches: list[Message] = field(default_factory=list)
    done: bool = False
    error: ClusterError | None = None
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    polled: float = field(default_factory=time.monotonic)

    def abandoned(self, now: float) -> bool:
        """Nobody has asked for progress for a while: the page was closed, so the scan stops."""
        return now - self.polled > SCAN_ABANDONED_S

    @property
    def rate(self) -> float:
        elapsed = (self.finished or time.monotonic()) - self.started
        return self.scanned / elapsed if elapsed > 0 else 0.0


def new_offset(kind: str, *, earliest: int, latest: int, value: int = 0, for_time: int = -1) -> int:
    """Where a reset puts one partition, clamped to the log as Kafka clamps it. `for_time` is the broker's
    first offset at or after a time, -1 when every record is older (then the partition goes to its end)."""
    if kind == "earliest":
        target = earliest
    elif kind == "latest":
        target = latest
    elif kind in ("timestamp", "duration"):
        target = latest if for_time < 0 else for_time
    elif kind == "offset":
        target = value
    else:
        raise ValueError(f"unknown reset kind {kind!r}")
    return min(max(target, earliest), latest)


def parse_cursor(text: str | None) -> dict[int, int] | None:
    """ "0:120,1:98" -> {0: 120, 1: 98}; the message browser's paging position, carried in the URL."""
    if not text:
        return None
    cursor = {}
    for part in text.split(","):
        partition, _, offset = part.partition(":")
        cursor[int(partition)] = int(offset)
    return cursor


def format_cursor(cursor: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(cursor.items()))


class Cluster:
    """One cluster's clients: an AdminClient, a lazily made Producer, and a small pool of assign-only
    Consumers (they never subscribe, so they never join a group)."""

    def __init__(self, settings: dict[str, str], *, timeout_s: float = 10.0, consumers: int = 4) -> None:
        self.settings = dict(settings)
        self.bootstrap = self.settings.get("bootstrap.servers", "")
        self.timeout_s = timeout_s
        self.admin = AdminClient({**self.settings, "socket.timeout.ms": int(timeout_s * 1000)})
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()
        self._consumers: queue.LifoQueue[Consumer] = queue.LifoQueue()
        self._made = 0
        self._max_consumers = consumers
        self._made_lock = threading.Lock()
        self._policies: dict[str, str | None] = {}
        self._policies_at = float("-inf")

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

    def topics(self, log_sizes: Callable[[], dict[tuple[str, int], int]] | None = None) -> list[TopicRow]:
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
        sizes = log_sizes() if log_sizes is not None else None
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

    def _positions(
        self, topic: str, partition: int | None, mode: str, value: int | None
    ) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
        """Each partition's (start, end) offsets, and where reading starts for `mode`."""
        partitions = self.topic(topic)
        chosen = [row for row in partitions if partition is None or row.partition == partition]
        if partition is not None and not chosen:
            raise ClusterError("UNKNOWN_TOPIC_OR_PART", f"topic {topic!r} has no partition {partition}")
        bounds = {row.partition: (row.start or 0, row.end or 0) for row in chosen}
        if mode == "newest":
            return bounds, {p: end for p, (_, end) in bounds.items()}
        if mode == "beginning":
            return bounds, {p: start for p, (start, _) in bounds.items()}
        if mode == "offset":
            return bounds, {p: min(max(value or 0, start), end) for p, (start, end) in bounds.items()}
        if mode == "timestamp":
            return bounds, self.offsets_for_time(topic, bounds, value or 0)
        raise ClusterError("INVALID_REQUEST", f"unknown browse mode {mode!r}")

    def offsets_for_time(self, topic: str, bounds: dict[int, tuple[int, int]], ts_ms: int) -> dict[int, int]:
        with self.consumer() as consumer:
            try:
                found = consumer.offsets_for_times(
                    [TopicPartition(topic, p, ts_ms) for p in bounds], timeout=self.timeout_s
                )
            except Exception as exc:
                raise as_cluster_error(exc) from None
        out = {}
        for tp in found:
            if tp.error is not None:
                raise ClusterError(tp.error.name(), tp.error.str())
            out[tp.partition] = bounds[tp.partition][1] if tp.offset < 0 else tp.offset
        return out

    def read_ranges(self, topic: str, ranges: dict[int, tuple[int, int]]) -> list[Message]:
        """Every message with start <= offset < stop of each partition's range: seek, never scan."""
        ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}
        if not ranges:
            return []
        found: dict[tuple[int, int], Message] = {}
        open_parts = set(ranges)
        deadline = time.monotonic() + self.timeout_s
        with self.consumer() as consumer:
            consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
            expected = sum(stop - start for start, stop in ranges.values())
            while open_parts and time.monotonic() < deadline:
                # consume() waits until it has `num_messages` or its timeout: ask for no more than are left
                # (fewer may come: compaction leaves gaps), or a range at the log end would wait it out.
                wanted = max(1, min(500, expected - len(found)))
                for msg in consumer.consume(wanted, timeout=0.1):
                    p = msg.partition()
                    if msg.topic() != topic or p not in ranges:
                        continue
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            open_parts.discard(p)
                            continue
                        raise ClusterError(error.name(), error.str())
                    start, stop = ranges[p]
                    offset = msg.offset()
                    if offset >= stop - 1:
                        open_parts.discard(p)
                    if start <= offset < stop:
                        found[(p, offset)] = _message(msg)
        if open_parts and not found:
            raise ClusterError("_TIMED_OUT", f"no messages arrived from {topic} within {self.timeout_s:g}s")
        return list(found.values())

    def browse(
        self,
        topic: str,
        *,
        partition: int | None,
        mode: str,
        value: int | None,
        limit: int,
        cursor: dict[int, int] | None,
    ) -> Page:
        limit = max(1, min(limit, MAX_BROWSE_LIMIT))
        bounds, positions = self._positions(topic, partition, mode, value)
        if cursor:
            positions = {p: cursor.get(p, pos) for p, pos in positions.items()}
        newest = mode == "newest"
        if newest:
            ranges = {p: (max(bounds[p][0], pos - limit), pos) for p, pos in positions.items()}
        else:
            ranges = {p: (pos, min(bounds[p][1], pos + limit)) for p, pos in positions.items()}
        read = self.read_ranges(topic, ranges)
        order = sorted(read, key=lambda m: (m.timestamp_ms or 0, m.offset, m.partition), reverse=newest)
        taken = order[:limit]
        next_cursor = dict(positions)
        for m in taken:
            if newest:
                next_cursor[m.partition] = min(next_cursor[m.partition], m.offset)
            else:
                next_cursor[m.partition] = max(next_cursor[m.partition], m.offset + 1)
        more = any(
            (next_cursor[p] > bounds[p][0]) if newest else (next_cursor[p] < bounds[p][1]) for p in bounds
        )
        return Page(taken, next_cursor if more and taken else None)

    def scan(self, job: ScanJob, ranges: dict[int, tuple[int, int]], max_matches: int) -> None:
        """Read every message of `ranges` once, keeping those whose key or value holds the needle."""
        needle = job.needle.encode()
        ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}
        consumer = self.new_consumer(**{"fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 262144})
        try:
            consumer.assign([TopicPartition(job.topic, p, start) for p, (start, _) in ranges.items()])
            open_parts = set(ranges)
            idle_deadline = time.monotonic() + self.timeout_s
            while open_parts and not job.stop.is_set():
                if job.abandoned(time.monotonic()):
                    break
                batch = consumer.consume(10000, timeout=0.5)
                if batch:
                    idle_deadline = time.monotonic() + self.timeout_s
                elif time.monotonic() > idle_deadline:
                    raise ClusterError("_TIMED_OUT", f"no messages for {self.timeout_s:g}s mid-scan")
                scanned = 0
                for msg in batch:
                    error = msg.error()
                    p = msg.partition()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            open_parts.discard(p)
                            continue
                        raise ClusterError(error.name(), error.str())
                    stop = ranges[p][1]
                    offset = msg.offset()
                    if offset >= stop:
                        open_parts.discard(p)
                        continue
                    if offset == stop - 1:
                        open_parts.discard(p)
                    scanned += 1
                    key = msg.key()
                    val = msg.value()
                    if (val is not None and needle in val) or (key is not None and needle in key):
                        job.matches.append(_message(msg))
                        if len(job.matches) >= max_matches:
                            job.stop.set()
                            break
                job.scanned += scanned
        except Exception as exc:
            job.error = as_cluster_error(exc)
        finally:
            consumer.close()
            job.finished = time.monotonic()
            job.done = True

    def scan_ranges(
        self, topic: str, partition: int | None, mode: str, value: int | None
    ) -> dict[int, tuple[int, int]]:
        """What a filter scans: from the chosen start (the beginning when browsing newest-first) to the end."""
        bounds, positions = self._positions(
            topic, partition, "beginning" if mode == "newest" else mode, value
        )
        return {p: (positions[p], bounds[p][1]) for p in bounds}

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        partition: int | None,
    ) -> tuple[int, int]:
        """Produce one message and wait for its acknowledgement: (partition, offset)."""
        producer = self.producer()
        outcome: dict[str, Any] = {}

        def delivered(err: KafkaError | None, msg: Any) -> None:
            outcome["error"] = err
            outcome["msg"] = msg

        kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers, "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            producer.produce(topic, **kwargs)
        except Exception as exc:
            raise as_cluster_error(exc) from None
        deadline = time.monotonic() + self.timeout_s + 15
        while "msg" not in outcome and time.monotonic() < deadline:
            producer.poll(0.1)
        if "msg" not in outcome:
            raise ClusterError("_MSG_TIMED_OUT", "the message was not acknowledged in time")
        if outcome["error"] is not None:
            raise ClusterError(outcome["error"].name(), outcome["error"].str())
        return outcome["msg"].partition(), outcome["msg"].offset()

    # ----- groups -----

    def _describe_groups(self, ids: list[str]) -> dict[str, Any]:
        if not ids:
            return {}
        futures = self.admin.describe_consumer_groups(ids, request_timeout=self.timeout_s)
        out = {}
        for gid, future in futures.items():
            try:
                out[gid] = future.result(timeout=self.timeout_s)
            except Exception as exc:
                error = as_cluster_error(exc)
                if error.unreachable:
                    raise error from None
        return out

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        request = [ConsumerGroupTopicPartitions(group)]
        futures = self.admin.list_consumer_group_offsets(request, request_timeout=self.timeout_s)
        result = self._result(futures[group])
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    def group_ids(self) -> list[str]:
        listed = self._result(self.admin.list_consumer_groups(request_timeout=self.timeout_s))
        return sorted(g.group_id for g in listed.valid)

    def groups(self) -> list[GroupRow]:
        ids = self.group_ids()
        described = self._describe_groups(ids)
        committed = {gid: self.committed(gid) for gid in ids}
        marks = self.watermarks(sorted({key for offsets in committed.values() for key in offsets}))
        rows = []
        for gid in ids:
            d = described.get(gid)
            lags = [max(marks[k][1] - off, 0) for k, off in committed[gid].items() if k in marks]
            rows.append(
                GroupRow(
                    group_id=gid,
                    state=state_name(d.state) if d is not None else "Unknown",
                    protocol=(d.partition_assignor or "") if d is not None else "",
                    type=getattr(getattr(d, "type", None), "name", "CLASSIC").lower()
                    if d is not None
                    else "",
                    members=len(d.members) if d is not None else 0,
                    lag=sum(lags) if lags else None,
                )
            )
        return rows

    def group(self, group: str) -> GroupDetail:
        d = self._describe_groups([group]).get(group)
        committed = self.committed(group)
        if (d is None or (state_name(d.state) == "Dead" and not d.members)) and not committed:
            raise ClusterError("GROUP_ID_NOT_FOUND", f"consumer group {group!r} does not exist")
        members = []
        owner: dict[tuple[str, int], str] = {}
        for member in d.members if d is not None else []:
            assigned = sorted((tp.topic, tp.partition) for tp in (member.assignment.topic_partitions or []))
            members.append(
                {
                    "member_id": member.member_id,
                    "instance_id": member.group_instance_id,
                    "client_id": member.client_id,
                    "host": member.host,
                    "assignment": assigned,
                }
            )
            for key in assigned:
                owner[key] = member.client_id or member.member_id
        keys = sorted(set(committed) | set(owner))
        marks = self.watermarks(keys)
        offsets = [
            GroupOffsetRow(t, p, committed.get((t, p)), marks.get((t, p), (None, None))[1], owner.get((t, p)))
            for t, p in keys
        ]
        coordinator = getattr(d, "coordinator", None) if d is not None else None
        return GroupDetail(
            group_id=group,
            state=state_name(d.state) if d is not None else "Empty",
            protocol=(d.partition_assignor or "") if d is not None else "",
            type=getattr(getattr(d, "type", None), "name", "CLASSIC").lower() if d is not None else "classic",
            coordinator=f"{coordinator.host}:{coordinator.port}" if coordinator is not None else None,
            members=members,
            offsets=offsets,
        )

    def plan_reset(
        self, group: str, topic: str | None, kind: str, value: int | None, ts_ms: int | None
    ) -> list[ResetRow]:
        """The offsets a reset would commit, per partition of `topic` (or of every topic the group has
        committed offsets on): nothing is changed."""
        committed = self.committed(group)
        metadata = self.metadata()
        topics = [topic] if topic else sorted({t for t, _ in committed})
        if not topics:
            raise ClusterError(
                "INVALID_REQUEST", "the group has no committed offsets: choose a topic to reset"
            )
        keys = []
        for name in topics:
            described = metadata.topics.get(name)
            if described is None or described.error is not None:
                raise ClusterError("UNKNOWN_TOPIC_OR_PART", f"topic {name!r} does not exist")
            keys += [(name, p) for p in sorted(described.partitions)]
        marks = self.watermarks(keys)
        for_time: dict[tuple[str, int], int] = {}
        if kind in ("timestamp", "duration"):
            for name in topics:
                bounds = {p: marks[(t, p)] for t, p in keys if t == name}
                for p, off in self.offsets_for_time(name, bounds, ts_ms or 0).items():
                    for_time[(name, p)] = off
        rows = []
        for key in keys:
            start, end = marks[key]
            target = new_offset(
                kind, earliest=start, latest=end, value=value or 0, for_time=for_time.get(key, -1)
            )
            rows.append(ResetRow(key[0], key[1], committed.get(key), target, start, end))
        return rows

    def execute_reset(self, group: str, rows: list[ResetRow]) -> None:
        d = self._describe_groups([group]).get(group)
        state = state_name(d.state) if d is not None else "Dead"
        if state not in RESETTABLE_STATES:
            raise ClusterError(
                "NON_EMPTY_GROUP",
                f"offsets can only be reset while the group is inactive, but it is {state} with "
                f"{len(d.members) if d is not None else 0} member(s); stop its consumers first",
            )
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(r.topic, r.partition, r.new) for r in rows]
        )
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        result = self._result(futures[group])
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            first = failed[0].error
            raise ClusterError(
                first.name(), "; ".join(f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in failed)
            )

    def delete_group(self, group: str) -> None:
        self._result(self.admin.delete_consumer_groups([group], request_timeout=self.timeout_s)[group])


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


def _message(msg: Any) -> Message:
    ts_type, ts = msg.timestamp()
    return Message(
        partition=msg.partition(),
        offset=msg.offset(),
        timestamp_ms=ts if ts_type != 0 and ts >= 0 else None,
        key=msg.key(),
        value=msg.value(),
        headers=list(msg.headers() or []),
    )
