"""The gateway's operations, independent of gRPC or HTTP.

Both API adapters validate their own wire format, then call one of these
methods and translate a `GatewayError` into their own status codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from .batches import Batch, Delivery, Message
from .cluster_consumers import ClusterConsumers
from .config import ClusterConfig, GatewayConfig
from .consumer_base import DeadLetterSink, shutting_down
from .errors import Failure, GatewayError, invalid, not_handed_out, validate_group, validate_topic
from .kafka import ClusterClient, PartitionOffsets, TopicInfo
from .metrics import GatewayMetrics

log = logging.getLogger(__name__)

_JANITOR_PERIOD_SECONDS = 1.0


@dataclass(frozen=True)
class AckRequest:
    """What a consume call acknowledges: nothing, the returned message, or an earlier one."""

    partition: int = -1
    offset: int = -1
    auto: bool = False

    @property
    def is_explicit(self) -> bool:
        return self.partition >= 0

    @classmethod
    def none(cls) -> AckRequest:
        return cls()

    @classmethod
    def automatic(cls) -> AckRequest:
        return cls(auto=True)

    @classmethod
    def of(cls, partition: int, offset: int) -> AckRequest:
        if partition < 0 or offset < 0:
            raise invalid(f"bad ack: partition={partition} offset={offset}")
        return cls(partition, offset)


class _Cluster:
    def __init__(self, config: ClusterConfig, metrics: GatewayMetrics, service: GatewayService) -> None:
        self.config = config
        self.client = ClusterClient(config, metrics)
        self.consumers = ClusterConsumers(
            config, self.client.client_id, metrics, service.dead_letter_sink(self), self.client.admin
        )


class GatewayService:
    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or GatewayMetrics()
        self._clusters: dict[str, _Cluster] = {}
        self._closing = False
        self._closed = False
        self._janitor: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for name, cluster_config in self.config.clusters.items():
            if not cluster_config.client_id:
                cluster_config.client_id = (
                    f"sluice-gw_{socket.gethostname()}_{os.getpid()}_{id(self) % 10000}"
                )
            self._clusters[name] = _Cluster(cluster_config, self.metrics, self)
        self._janitor = asyncio.create_task(self._drop_idle_consumers())

    def begin_close(self) -> None:
        """Refuse new work and release waiting long polls; `close` then finishes the job."""
        self._closing = True
        for cluster in self._clusters.values():
            cluster.consumers.release_waiters()

    async def close(self) -> None:
        self.begin_close()
        if self._closed:
            return
        self._closed = True
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
        for cluster in self._clusters.values():
            await cluster.consumers.close()
        for cluster in self._clusters.values():
            await cluster.client.close()
            await asyncio.to_thread(cluster.client.close_admin)

    @property
    def closing(self) -> bool:
        return self._closing

    async def _drop_idle_consumers(self) -> None:
        while True:
            await asyncio.sleep(_JANITOR_PERIOD_SECONDS)
            for cluster in self._clusters.values():
                try:
                    await cluster.consumers.drop_idle()
                except Exception:  # a janitor that dies would leak every idle consumer
                    log.exception("dropping idle consumers of %s failed", cluster.config.name)

    def _cluster(self, name: str) -> _Cluster:
        if self._closing:
            raise shutting_down()
        cluster = self._clusters.get(name or self.config.default_cluster)
        if cluster is None:
            raise invalid(f"Unknown cluster: {name}")
        return cluster

    # -- produce ---------------------------------------------------------------
    async def produce(
        self,
        cluster: str,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]] = (),
        *,
        sync: bool = True,
    ) -> tuple[int, int]:
        target = self._cluster(cluster)
        validate_topic(topic)
        return await target.client.produce(topic, key, value, headers, wait=sync)

    def dead_letter_sink(self, cluster: _Cluster) -> DeadLetterSink | None:
        """Where the consumers of `cluster` park dead letters; None drops them (no dead_letter_topic)."""
        template = cluster.config.consumer.dead_letter_topic
        if not template:
            return None

        async def park(group: str, topic: str, message: Message) -> None:
            target_topic = template.replace("{topic}", topic).replace("{group}", group)
            headers = [
                *message.headers,
                ("sluice-dead-letter-group", group.encode()),
                ("sluice-dead-letter-origin", f"{topic}/{message.partition}/{message.offset}".encode()),
            ]
            try:
                # Synchronous: the consumer acks the message only once Kafka has the dead letter.
                await cluster.client.produce(target_topic, message.key, message.value or b"", headers)
            except Exception as exc:
                log.error(
                    "group %s: dead letter %s/%d/%d not produced to %s, it stays un-acked and is retried: %s",
                    group,
                    topic,
                    message.partition,
                    message.offset,
                    target_topic,
                    exc,
                )
                raise

        return park

    # -- consume and ack -------------------------------------------------------
    async def consume(
        self, cluster: str, group: str, topic: str, ack: AckRequest, timeout: float | None = None
    ) -> Delivery:
        batches = await self.consume_many(
            cluster,
            group,
            topic,
            [(ack.partition, ack.offset)] if ack.is_explicit else [],
            1,
            timeout,
            auto_ack=ack.auto,
        )
        return batches[0].deliveries()[0]

    async def consume_many(
        self,
        cluster: str,
        group: str,
        topic: str,
        acks: Sequence[tuple[int, int]],
        max_messages: int,
        timeout: float | None = None,
        *,
        auto_ack: bool = False,
        ack_ranges: Sequence[tuple[int, int, int]] = (),
        batch: bool = False,
        max_bytes: int | None = None,
    ) -> list[Batch]:
        """Acknowledge, then hand out up to `max_messages` (and about `max_bytes` of reply).

        `batch` callers (ConsumeBatch, ConsumeStream) are held to max_pending_batch_messages per
        partition instead of kafka-pixy's max_pending_messages.
        """
        target = self._cluster(cluster)
        validate_topic(topic)
        validate_group(group)
        if max_messages < 1:
            raise invalid(f"max_messages must be >= 1, got {max_messages}")
        if acks or ack_ranges:
            self._ack_all(target, group, topic, acks, ack_ranges)
        consumer = await target.consumers.get(group, topic)
        settings = target.config.consumer
        wait = settings.long_polling_timeout if timeout is None else timeout
        max_pending = settings.max_pending_batch_messages if batch else None
        return await consumer.consume_many(
            max_messages, wait, auto_ack=auto_ack, max_pending=max_pending, max_bytes=max_bytes
        )

    async def ack(self, cluster: str, group: str, topic: str, partition: int, offset: int) -> None:
        self.ack_many(cluster, group, topic, [(partition, offset)])

    def ack_many(
        self,
        cluster: str,
        group: str,
        topic: str,
        acks: Sequence[tuple[int, int]],
        ack_ranges: Sequence[tuple[int, int, int]] = (),
    ) -> None:
        target = self._cluster(cluster)
        validate_topic(topic)
        validate_group(group)
        self._ack_all(target, group, topic, acks, ack_ranges)

    def _ack_all(
        self,
        target: _Cluster,
        group: str,
        topic: str,
        acks: Sequence[tuple[int, int]],
        ack_ranges: Sequence[tuple[int, int, int]] = (),
    ) -> None:
        if not acks and not ack_ranges:
            return
        for partition, offset in acks:
            if partition < 0 or offset < 0:
                raise invalid(f"bad ack: partition={partition} offset={offset}")
        for partition, begin, end in ack_ranges:
            if partition < 0 or begin < 0 or end <= begin:
                raise invalid(f"bad ack range: partition={partition} begin={begin} end={end}")
        consumer = target.consumers.existing(group, topic)
        if consumer is None:
            raise not_handed_out(group, topic, acks[0] if acks else ack_ranges[0][:2])
        consumer.ack_many(acks, ack_ranges)

    # -- admin -----------------------------------------------------------------
    async def get_offsets(self, cluster: str, group: str, topic: str) -> list[PartitionOffsets]:
        target = self._cluster(cluster)
        validate_topic(topic)
        validate_group(group)
        await self._refuse_share_group(target, group, "its offsets are the share-partitions' start offsets")
        return await target.client.group_offsets(group, topic)

    async def _refuse_share_group(self, target: _Cluster, group: str, why: str) -> None:
        """The offset calls are a consumer group's: a share group keeps no committed offsets."""
        if await target.consumers.serves_share(group):
            raise invalid(
                f"group {group} is a share group (consumer backend share): {why}, kept by the broker; "
                "see kafka-share-groups.sh --describe / --reset-offsets"
            )

    async def set_offsets(
        self, cluster: str, group: str, topic: str, offsets: Sequence[tuple[int, int, str]]
    ) -> list[tuple[int, int, int]] | None:
        target = self._cluster(cluster)
        validate_topic(topic)
        validate_group(group)
        if not offsets:
            raise invalid("no offsets given")
        named: set[int] = set()
        for partition, _, _ in offsets:
            if partition in named:
                raise invalid(f"partition {partition} is named more than once")
            named.add(partition)
        await self._refuse_share_group(target, group, "it has no committed offsets to set")
        # Our own member of the group would overwrite the new offsets with its
        # next commit (and Kafka refuses commits to an active group): leave first.
        await target.consumers.drop(group, topic)
        return await target.client.set_group_offsets(group, topic, offsets)

    async def list_topics(self, cluster: str, with_config: bool = False) -> dict[str, TopicInfo]:
        return await self._cluster(cluster).client.list_topics(with_config)

    async def topic_metadata(self, cluster: str, topic: str, with_config: bool = False) -> TopicInfo:
        target = self._cluster(cluster)
        validate_topic(topic)
        return await target.client.topic(topic, with_config)

    async def list_consumers(
        self, cluster: str, topic: str, group: str = ""
    ) -> dict[str, dict[str, list[int]]]:
        target = self._cluster(cluster)
        validate_topic(topic)
        if group:
            validate_group(group)
        return await target.client.topic_consumers(topic, group)


def failure_of(error: BaseException) -> GatewayError:
    """Anything raised by the service, as a GatewayError (unexpected ones become INTERNAL)."""
    if isinstance(error, GatewayError):
        return error
    log.exception("unexpected gateway failure", exc_info=error)
    return GatewayError(Failure.INTERNAL, f"internal error: {error}")
