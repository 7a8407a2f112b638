"""The gateway's group consumers of one cluster, one per (group, topic), created on first use and dropped
when idle (kafka-pixy's subscription_timeout)."""

from __future__ import annotations

import asyncio
import logging
import time

from .config import ClusterConfig
from .consumer import DeadLetterSink, GroupTopicConsumer, shutting_down
from .errors import Failure, GatewayError
from .metrics import GatewayMetrics

log = logging.getLogger("sluice.gateway.consumer")


class ClusterConsumers:
    """The group consumers of one cluster, created on first use and dropped when idle."""

    def __init__(
        self,
        cluster: ClusterConfig,
        client_id: str,
        metrics: GatewayMetrics,
        dead_letter_sink: DeadLetterSink | None,
    ) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.metrics = metrics
        self._dead_letter_sink = dead_letter_sink
        self._consumers: dict[tuple[str, str], GroupTopicConsumer] = {}
        self._stopping: set[asyncio.Future[None]] = set()
        self._closing = False

    def get(self, group: str, topic: str) -> GroupTopicConsumer:
        if self.cluster.consumer.disabled:
            raise GatewayError(Failure.UNAVAILABLE, f"consumer is disabled for cluster {self.cluster.name}")
        if self._closing:
            raise shutting_down()
        consumer = self._consumers.get((group, topic))
        if consumer is not None and consumer.failed:
            # Start over rather than fail every request until the gateway restarts.
            stale = self._consumers.pop((group, topic))
            task = asyncio.ensure_future(stale.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
            consumer = None
        if consumer is None:
            consumer = GroupTopicConsumer(
                self.cluster, group, topic, self.client_id, self.metrics, self._dead_letter_sink
            )
            self._consumers[(group, topic)] = consumer
            self.metrics.active_consumers.labels(self.cluster.name).set(len(self._consumers))
        return consumer

    def existing(self, group: str, topic: str) -> GroupTopicConsumer | None:
        return self._consumers.get((group, topic))

    async def drop(self, group: str, topic: str) -> None:
        consumer = self._consumers.pop((group, topic), None)
        if consumer is not None:
            await consumer.stop()
            self.metrics.active_consumers.labels(self.cluster.name).set(len(self._consumers))

    async def drop_idle(self) -> None:
        """kafka-pixy's subscription_timeout: leave the group after a quiet spell."""
        now = time.monotonic()
        idle = [key for key, consumer in self._consumers.items() if consumer.is_idle(now)]
        for group, topic in idle:
            log.info("group %s topic %s: idle, leaving the group", group, topic)
            await self.drop(group, topic)

    def release_waiters(self) -> None:
        self._closing = True
        for consumer in self._consumers.values():
            consumer.release_waiters()

    async def close(self) -> None:
        self._closing = True
        consumers = list(self._consumers)
        await asyncio.gather(*(self.drop(group, topic) for group, topic in consumers), *self._stopping)
