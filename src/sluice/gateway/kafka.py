"""The confluent-kafka side of one cluster: producing and admin queries.

Every blocking librdkafka call runs in a worker thread (`asyncio.to_thread`) or
in the producer's own poll thread; the event loop only awaits futures.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource

from sluice.security.http_auth import redact_url

from .config import ClusterConfig
from .errors import Failure, GatewayError, partition_not_found, record_too_large
from .metrics import GatewayMetrics
from .partitioners import Partitioner, murmur2_partition

log = logging.getLogger(__name__)

_METADATA_TTL_SECONDS = 30.0
_ADMIN_TIMEOUT_SECONDS = 10.0
# How long a TLS/SASL failure towards a cluster is offered as the cause of requests that fail.
_SECURITY_ERROR_MEMORY_SECONDS = 60.0
# Freshly auto-created topics report "leader not available" for a moment.
_TOPIC_APPEAR_RETRIES = 10
# How often delivery reports are served on the event loop while records are in flight, and otherwise.
_DELIVERY_POLL_SECONDS = 0.001
_IDLE_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionOffsets:
    partition: int
    begin: int
    end: int
    offset: int
    metadata: str

    @property
    def lag(self) -> int:
        # kafka-pixy: no committed offset (-1) means "newest", so nothing lags.
        if self.offset < 0:
            return 0
        return max(self.end - self.offset, 0)


def unknown_topic(topic: str) -> GatewayError:
    return GatewayError(Failure.NOT_FOUND, f"Unknown topic: {topic}")


def _kafka_failure(error: KafkaError, what: str) -> GatewayError:
    code = error.code()
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
        return GatewayError(Failure.NOT_FOUND, f"{what}: {error.str()}")
    if code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError.RECORD_LIST_TOO_LARGE):
        return GatewayError(Failure.TOO_LARGE, f"{what}: {error.str()}")
    if code == KafkaError._QUEUE_FULL:
        return GatewayError(Failure.TOO_MANY_REQUESTS, f"{what}: producer queue is full")
    if code in (KafkaError.INVALID_RECORD, KafkaError.INVALID_MSG, KafkaError.TOPIC_EXCEPTION):
        # The broker refused the record for what it holds (no key for a compacted topic; INVALID_MSG is
        # CORRUPT_MESSAGE before 2.4) or where it goes (an internal topic: TOPIC_EXCEPTION, Kafka's
        # INVALID_TOPIC_EXCEPTION, which Confluent's proxy answers 400): the caller's to fix.
        return GatewayError(Failure.INVALID_ARGUMENT, f"{what}: {error.str()}")
    return GatewayError(Failure.INTERNAL, f"{what}: {error.str()}")


class ClusterClient:
    """Producer, admin client and metadata cache of one named cluster."""

    def __init__(
        self, config: ClusterConfig, metrics: GatewayMetrics, *, deliveries_on_loop: bool = False
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.client_id = config.client_id or f"sluice-gateway-{uuid.uuid4().hex[:8]}"
        # The last TLS or SASL failure towards the cluster, with when (librdkafka reports it through error_cb
        # only; the request that then times out just says "transport failure").
        self._security_error: tuple[KafkaError, float] | None = None
        self._producer = Producer(
            {**config.producer_config(self.client_id), "error_cb": self._on_client_error}
        )
        self._partitioner = Partitioner(config.producer.partitioner)
        self._produced_sync = metrics.produced.labels(config.name, "sync")
        self._admin = AdminClient({**config.client_config(), "client.id": self.client_id})
        self._partition_counts: dict[str, tuple[int, float]] = {}
        self._watermark_reader: Consumer | None = None
        self._watermark_lock = threading.Lock()
        self._running = True
        self._poller: threading.Thread | None = None
        self._pump: asyncio.Task[None] | None = None
        self._records_waiting: asyncio.Event | None = None
        # The loop the batches' futures belong to, and the thread it runs on if delivery reports are served there.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        if deliveries_on_loop:
            self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
            self._records_waiting = asyncio.Event()
            self._pump = self._loop.create_task(self._pump_deliveries())
        else:
            self._poller = threading.Thread(
                target=self._poll_deliveries, name=f"gw-producer-{config.name}", daemon=True
            )
            self._poller.start()

    @property
    def admin(self) -> AdminClient:
        return self._admin

    def _on_client_error(self, error: KafkaError) -> None:
        if error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            self._security_error = (error, time.monotonic())
            log.error("cluster %s: %s", self.config.name, error.str())

    def _failure(self, error: KafkaError, what: str) -> GatewayError:
        """`_kafka_failure`, naming a recent TLS/SASL failure towards the cluster as the likely cause."""
        failure = _kafka_failure(error, what)
        recent = self._security_error
        if recent is not None and time.monotonic() - recent[1] < _SECURITY_ERROR_MEMORY_SECONDS:
            failure = GatewayError(failure.failure, f"{failure.message} (cause: {recent[0].str()})")
        return failure

    # -- lifecycle -------------------------------------------------------------
    def _poll_deliveries(self) -> None:
        while self._running:
            try:
                self._producer.poll(0.1)
            except Exception:  # as in _pump_deliveries: later deliveries still get their reports
                log.exception("cluster %s: a delivery report could not be handled", self.config.name)

    async def _pump_deliveries(self) -> None:
        """Delivery reports served on the event loop: no thread takes the GIL for each of them, and a batch
        completes without a wake-up from another thread. Polled every millisecond while records are in
        flight; when none are, only the producer's other events (errors) are looked at, every 100 ms."""
        producer, waiting = self._producer, self._records_waiting
        assert waiting is not None
        while self._running:
            try:
                producer.poll(0)
            except Exception:  # a delivery callback that failed must not stop every later delivery
                log.exception("cluster %s: a delivery report could not be handled", self.config.name)
            if len(producer):
                await asyncio.sleep(_DELIVERY_POLL_SECONDS)
                continue
            waiting.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiting.wait(), _IDLE_POLL_SECONDS)

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        remaining = await asyncio.to_thread(self._producer.flush, self.config.producer.shutdown_flush_seconds)
        if remaining:
            log.warning(
                "cluster %s: %d produced messages not delivered at shutdown", self.config.name, remaining
            )
        self._running = False
        if self._poller is not None:
            await asyncio.to_thread(self._poller.join, 2.0)

    # -- producing -------------------------------------------------------------
    async def partition_count(self, topic: str) -> int:
        cached = self._partition_counts.get(topic)
        now = time.monotonic()
        if cached is not None and cached[1] > now:
            return cached[0]
        count = await asyncio.to_thread(self._fetch_partition_count, topic)
        self._partition_counts[topic] = (count, now + _METADATA_TTL_SECONDS)
        return count

    def _fetch_partition_count(self, topic: str) -> int:
        # The producer's metadata request may auto-create the topic, as kafka-pixy's would.
        for attempt in range(_TOPIC_APPEAR_RETRIES):
            try:
                metadata = self._producer.list_topics(topic, timeout=_ADMIN_TIMEOUT_SECONDS)
            except KafkaException as exc:
                raise self._failure(exc.args[0], f"metadata of {topic}") from exc
            found = metadata.topics.get(topic)
            if found is not None and found.error is None and found.partitions:
                return len(found.partitions)
            retriable = found is not None and found.error is not None and found.error.retriable()
            if not retriable and attempt > 1:
                break
            time.sleep(0.1)
        raise unknown_topic(topic)

    async def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]] = (),
        *,
        wait: bool = True,
    ) -> tuple[int, int]:
        """Write one message; with `wait`, return (partition, offset) once the broker has it."""
        if len(value) + len(key or b"") > self.config.producer.max_message_bytes:
            raise GatewayError(
                Failure.TOO_LARGE,
                f"message of {len(value)} bytes exceeds producer.max_message_bytes="
                f"{self.config.producer.max_message_bytes}",
            )
        partition_count = await self.partition_count(topic)
        partition = self._partitioner.choose(topic, key, partition_count)
        loop = asyncio.get_running_loop()
        delivered: asyncio.Future[tuple[int, int]] | None = loop.create_future() if wait else None
        started = time.monotonic()

        def on_delivery(error: KafkaError | None, message: Any) -> None:
            if delivered is None:
                if error is not None:
                    log.warning("async produce to %s failed: %s", topic, error.str())
                return
            loop.call_soon_threadsafe(_settle, delivered, error, message, topic)

        try:
            self._producer.produce(
                topic,
                value=value,
                key=key,
                partition=partition,
                headers=list(headers) or None,
                on_delivery=on_delivery,
            )
        except BufferError as exc:
            raise GatewayError(Failure.TOO_MANY_REQUESTS, "producer queue is full, retry later") from exc
        except KafkaException as exc:
            raise self._failure(exc.args[0], f"produce to {topic}") from exc
        self.metrics.produced.labels(self.config.name, "sync" if wait else "async").inc()
        if self._records_waiting is not None:
            self._records_waiting.set()
        if delivered is None:
            return -1, -1
        result = await delivered
        self.metrics.produce_latency.labels(self.config.name).observe(time.monotonic() - started)
        return result

    async def produce_many(
        self,
        topic: str,
        records: Sequence[tuple[bytes | None, bytes | None, int | None, Sequence[tuple[str, bytes]]]],
    ) -> list[tuple[int, int] | GatewayError]:
        """Write (key, value, partition or None, headers) records in one go and wait for all of them: the
        (partition, offset) of each, or why that one failed. One future for the batch, not one per record.
        Records without a partition go where the Java producer would put them (Confluent's REST Proxy is one):
        murmur2 of the key, or librdkafka's sticky choice for a null key."""
        return await self.enqueue_many(topic, records, await self.partition_count(topic))

    def enqueue_many(
        self,
        topic: str,
        records: Sequence[tuple[bytes | None, bytes | None, int | None, Sequence[tuple[str, bytes]]]],
        partition_count: int,
    ) -> asyncio.Future[list[tuple[int, int] | GatewayError]]:
        """`produce_many`'s first half, without suspending: records handed over one after the other keep
        their order on each partition; the future resolves as `produce_many` does."""
        batch = _BatchDelivery(
            topic, self._loop or asyncio.get_running_loop(), len(records), self._loop_thread
        )
        limit = self.config.producer.max_message_bytes
        # Positional arguments (topic, value, key, partition, on_delivery, callback, timestamp, headers): the
        # C extension parses keywords at about twice the cost of the librdkafka call itself.
        produce, report, partial = self._producer.produce, batch.report, functools.partial
        for index, (key, value, partition, headers) in enumerate(records):
            if len(value or b"") + len(key or b"") > limit:
                batch.settle(index, record_too_large(limit))
                continue
            if partition is None:
                # murmur2 of the key; a null key is left to librdkafka's sticky partitioning, as Java does.
                partition = -1 if key is None else murmur2_partition(key, partition_count)
            elif not 0 <= partition < partition_count:
                batch.settle(index, partition_not_found(topic, partition))
                continue
            try:
                if headers:
                    produce(topic, value, key, partition, partial(report, index), None, 0, list(headers))
                else:
                    produce(topic, value, key, partition, partial(report, index))
            except BufferError:
                batch.settle(
                    index, GatewayError(Failure.TOO_MANY_REQUESTS, "producer queue is full, retry later")
                )
            except KafkaException as exc:
                batch.settle(index, self._failure(exc.args[0], f"produce to {topic}"))
        self._produced_sync.inc(len(records))
        if self._records_waiting is not None:
            self._records_waiting.set()
        return batch.done

    # -- admin -----------------------------------------------------------------
    async def list_topics(self, with_config: bool = False) -> dict[str, TopicInfo]:
        metadata = await asyncio.to_thread(self._admin.list_topics, timeout=_ADMIN_TIMEOUT_SECONDS)
        topics = {
            name: TopicInfo(name, _partitions_of(topic))
            for name, topic in metadata.topics.items()
            if topic.error is None and not name.startswith("__")
        }
        if with_config:
            for name in list(topics):
                topics[name] = TopicInfo(name, topics[name].partitions, await self.topic_config(name))
        return topics

    async def topic(self, topic: str, with_config: bool = False) -> TopicInfo:
        # Asking for all topics rather than this one: a metadata request naming a
        # topic makes brokers with auto-creation create it, and a lookup must not.
        metadata = await asyncio.to_thread(self._admin.list_topics, timeout=_ADMIN_TIMEOUT_SECONDS)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise unknown_topic(topic)
        config = await self.topic_config(topic) if with_config else {}
        return TopicInfo(topic, _partitions_of(found), config)

    async def topic_config(self, topic: str) -> dict[str, str]:
        def describe() -> dict[str, str]:
            futures = self._admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
            entries = next(iter(futures.values())).result(timeout=_ADMIN_TIMEOUT_SECONDS)
            return {name: str(entry.value) for name, entry in entries.items() if entry.value is not None}

        try:
            return await asyncio.to_thread(describe)
        except KafkaException as exc:
            # Brokers without DescribeConfigs still have topics worth listing.
            log.info("describe configs of %s failed: %s", topic, exc)
            return {}

    async def group_offsets(self, group: str, topic: str) -> list[PartitionOffsets]:
        info = await self.topic(topic)
        partitions = [p.partition for p in info.partitions]

        def fetch() -> list[PartitionOffsets]:
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])
            future = self._admin.list_consumer_group_offsets([request])[group]
            committed = {
                tp.partition: tp for tp in future.result(timeout=_ADMIN_TIMEOUT_SECONDS).topic_partitions
            }
            results = []
            for partition in partitions:
                begin, end = self._watermarks(topic, partition)
                tp = committed.get(partition)
                offset = tp.offset if tp is not None and tp.error is None else -1
                metadata = (tp.metadata or "") if tp is not None else ""
                results.append(
                    PartitionOffsets(partition, begin, end, offset if offset >= 0 else -1, metadata)
                )
            return results

        try:
            return await asyncio.to_thread(fetch)
        except KafkaException as exc:
            raise self._failure(exc.args[0], f"offsets of group {group}") from exc

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        # An AdminClient cannot query watermarks; a throwaway Consumer's ListOffsets can.
        consumer = self._watermark_consumer()
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=_ADMIN_TIMEOUT_SECONDS
        )
        return int(low), int(high)

    def _watermark_consumer(self) -> Consumer:
        with self._watermark_lock:
            if self._watermark_reader is None:
                # Never subscribes, so it never joins this (private) group.
                self._watermark_reader = Consumer(
                    {
                        **self.config.client_config(),
                        "group.id": f"{self.client_id}-watermarks",
                        "enable.auto.commit": False,
                        "client.id": self.client_id,
                    }
                )
            return self._watermark_reader

    async def set_group_offsets(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int, str]]
    ) -> list[tuple[int, int, int]] | None:
        """Commit offsets for a group; with a sluice admin listener configured (and no metadata to
        keep), as a live rewind: members elsewhere re-read from them too. Returns (partition, requested,
        actual) per partition when the broker said where it clamped them, else None."""
        info = await self.topic(topic)
        known = {p.partition for p in info.partitions}
        for partition, offset, _ in offsets:
            if partition not in known:
                raise GatewayError(Failure.INVALID_ARGUMENT, f"topic {topic} has no partition {partition}")
            if offset < 0:
                raise GatewayError(Failure.INVALID_ARGUMENT, f"bad offset {offset} for partition {partition}")
        # The admin API commits no metadata; kafka-pixy's sparse acks live there, so keep Kafka's path.
        if self.config.admin_url and not any(metadata for _, _, metadata in offsets):
            return await self._rewind_live(group, topic, offsets)

        def alter() -> None:
            partitions = [TopicPartition(topic, p, o, metadata=m) for p, o, m in offsets]
            futures = self._admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, partitions)]
            )
            result = futures[group].result(timeout=_ADMIN_TIMEOUT_SECONDS)
            for tp in result.topic_partitions:
                if tp.error is not None:
                    raise KafkaException(tp.error)

        try:
            await asyncio.to_thread(alter)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.NON_EMPTY_GROUP):
                raise GatewayError(
                    Failure.INVALID_ARGUMENT,
                    f"set offsets of group {group}: it has members outside this gateway ({error.str()}); "
                    "a sluice broker rewinds them live when the cluster's kafka.sluice_admin is set",
                ) from exc
            raise self._failure(error, f"set offsets of group {group}") from exc
        return None

    async def _rewind_live(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int, str]]
    ) -> list[tuple[int, int, int]]:
        body = {
            "live": True,
            "offsets": [{"topic": topic, "partition": p, "offset": o} for p, o, _ in offsets],
        }
        url = f"{self.config.admin_url}/v1/groups/{quote(group, safe='')}/rewind"
        timeout = aiohttp.ClientTimeout(total=_ADMIN_TIMEOUT_SECONDS)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, json=body) as response,
            ):
                answer = await response.json(content_type=None)
                status = response.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise GatewayError(
                Failure.UNAVAILABLE,
                f"set offsets of group {group}: the broker's admin API at "
                f"{redact_url(self.config.admin_url)} did not answer ({exc or type(exc).__name__})",
            ) from exc
        if status != 200 or not isinstance(answer, dict):
            error = answer.get("error", "") if isinstance(answer, dict) else ""
            message = answer.get("message", "") if isinstance(answer, dict) else str(answer)
            failure = (
                Failure.NOT_FOUND
                if status == 404
                else (Failure.INVALID_ARGUMENT if 400 <= status < 500 else Failure.INTERNAL)
            )
            raise GatewayError(failure, f"set offsets of group {group}: {error} {message}".strip())
        return [
            (int(row["partition"]), int(row["requested"]), int(row["actual"])) for row in answer["offsets"]
        ]

    async def topic_consumers(self, topic: str, group: str = "") -> dict[str, dict[str, list[int]]]:
        """group -> member -> partitions of `topic` it holds, from the brokers' group descriptions."""

        def describe() -> dict[str, dict[str, list[int]]]:
            if group:
                group_ids = [group]
            else:
                listing = self._admin.list_consumer_groups().result(timeout=_ADMIN_TIMEOUT_SECONDS)
                group_ids = [g.group_id for g in listing.valid]
            if not group_ids:
                return {}
            answer: dict[str, dict[str, list[int]]] = {}
            for group_id, future in self._admin.describe_consumer_groups(group_ids).items():
                try:
                    description = future.result(timeout=_ADMIN_TIMEOUT_SECONDS)
                except KafkaException as exc:
                    log.info("describe group %s failed: %s", group_id, exc)
                    continue
                members: dict[str, list[int]] = {}
                for member in description.members:
                    assignment = member.assignment.topic_partitions if member.assignment else []
                    partitions = sorted(tp.partition for tp in assignment if tp.topic == topic)
                    if partitions:
                        name = member.client_id if member.client_id not in members else member.member_id
                        members[name] = partitions
                if members:
                    answer[group_id] = members
            return answer

        try:
            return await asyncio.to_thread(describe)
        except KafkaException as exc:
            raise self._failure(exc.args[0], "list consumers") from exc

    def close_admin(self) -> None:
        with self._watermark_lock:
            if self._watermark_reader is not None:
                self._watermark_reader.close()
                self._watermark_reader = None
        # librdkafka handles live until garbage collected, reconnecting all the
        # while; dropping them here ends that as soon as the gateway stops.
        del self._admin
        del self._producer


class _BatchDelivery:
    """The outcomes of one batch of records; `done` resolves once every record has one.

    `report` runs in the producer's poll thread, or on the event loop itself when the client serves its
    delivery reports there (then the batch completes without a wake-up through the loop's self-pipe):
    counting with `itertools.count` (atomic under the GIL) rather than a lock keeps each report cheap.
    """

    def __init__(self, topic: str, loop: asyncio.AbstractEventLoop, size: int, loop_thread: int = 0) -> None:
        self.topic = topic
        self.loop = loop
        self.loop_thread = loop_thread
        self.size = size
        self.results: list[Any] = [None] * size
        self.done: asyncio.Future[list[tuple[int, int] | GatewayError]] = loop.create_future()
        self._settled = itertools.count(1)
        if size == 0:
            self.done.set_result([])

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(self.results)

    def report(self, index: int, error: KafkaError | None, message: Any) -> None:
        self.results[index] = (
            _kafka_failure(error, f"produce to {self.topic}")
            if error is not None
            else (message.partition(), message.offset())
        )
        if next(self._settled) == self.size:
            if threading.get_ident() == self.loop_thread:
                self._finish()
            else:
                self.loop.call_soon_threadsafe(self._finish)

    def settle(self, index: int, failure: GatewayError) -> None:
        """A record refused before it reached the producer (called on the event loop)."""
        self.results[index] = failure
        if next(self._settled) == self.size:
            self._finish()


def _partitions_of(topic: Any) -> tuple[PartitionInfo, ...]:
    return tuple(
        PartitionInfo(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
        for p in sorted(topic.partitions.values(), key=lambda p: p.id)
    )


def _settle(
    future: asyncio.Future[tuple[int, int]], error: KafkaError | None, message: Any, topic: str
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(_kafka_failure(error, f"produce to {topic}"))
    else:
        future.set_result((message.partition(), message.offset()))
