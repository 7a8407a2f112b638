"""The gateway's group consumers of one cluster, one per (group, topic), created on first use and dropped
when idle (kafka-pixy's subscription_timeout). Each group is served by the backend its settings name
(consumer.backend, consumer.group_backends): the offset tracker over a consumer group, or a share group where
the cluster serves share groups (asked once per cluster), else the tracker; a log line says which and why."""

from __future__ import annotations

import asyncio
import logging
import time

from confluent_kafka.admin import AdminClient

from .config import SHARE_BACKEND, ClusterConfig
from .consumer import GroupTopicConsumer
from .consumer_base import DeadLetterSink, TopicConsumer, shutting_down
from .errors import Failure, GatewayError
from .metrics import GatewayMetrics
from .share_consumer import ShareTopicConsumer
from .share_groups import ShareSupport, probe_share_support

log = logging.getLogger("sluice.gateway.consumer")

_PROBE_TIMEOUT_SECONDS = 10.0


class ClusterConsumers:
    """The group consumers of one cluster, created on first use and dropped when idle."""

    def __init__(
        self,
        cluster: ClusterConfig,
        client_id: str,
        metrics: GatewayMetrics,
        dead_letter_sink: DeadLetterSink | None,
        admin: AdminClient,
    ) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.metrics = metrics
        self._dead_letter_sink = dead_letter_sink
        self._admin = admin
        self._consumers: dict[tuple[str, str], TopicConsumer] = {}
        self._stopping: set[asyncio.Future[None]] = set()
        self._closing = False
        self._share_support: ShareSupport | None = None
        self._probe_lock = asyncio.Lock()

    async def get(self, group: str, topic: str) -> TopicConsumer:
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
            share = await self._serves_share(group, topic)
            consumer = self._consumers.get((group, topic))  # another caller may have made it meanwhile
            if consumer is not None:
                return consumer
            if self._closing:
                raise shutting_down()
            if share:
                consumer = ShareTopicConsumer(
                    self.cluster,
                    group,
                    topic,
                    self.client_id,
                    self.metrics,
                    self._admin,
                    self._dead_letter_sink,
                )
            else:
                consumer = GroupTopicConsumer(
                    self.cluster, group, topic, self.client_id, self.metrics, self._dead_letter_sink
                )
            self._consumers[(group, topic)] = consumer
            self.metrics.active_consumers.labels(self.cluster.name).set(len(self._consumers))
        return consumer

    async def _serves_share(self, group: str, topic: str) -> bool:
        """Whether a share group serves `group` here; logs which backend does, and why."""
        where = f"group {group} topic {topic} on cluster {self.cluster.name}"
        if self.cluster.consumer.backend_of(group) != SHARE_BACKEND:
            log.info(
                "%s: served by the offset tracker (consumer group): its backend setting is tracker", where
            )
            return False
        support = await self.share_support()
        if support.served:
            log.info("%s: served by a share group (backend setting share; %s)", where, support.reason)
        else:
            log.warning(
                "%s: served by the offset tracker (consumer group), although its backend setting is share: %s",
                where,
                support.reason,
            )
        return support.served

    async def serves_share(self, group: str) -> bool:
        """Whether a share group serves `group` here (its setting says share, and the cluster serves them)."""
        if self.cluster.consumer.backend_of(group) != SHARE_BACKEND:
            return False
        return (await self.share_support()).served

    async def share_support(self) -> ShareSupport:
        """Whether the cluster serves share groups, asked once (again after a failed attempt)."""
        async with self._probe_lock:
            if self._share_support is None:
                try:
                    self._share_support = await asyncio.to_thread(
                        probe_share_support, self.cluster, _PROBE_TIMEOUT_SECONDS
                    )
                except Exception as exc:  # unreachable now: the next call asks again
                    raise GatewayError(
                        Failure.UNAVAILABLE,
                        f"cannot learn whether cluster {self.cluster.name} serves share groups: {exc}",
                    ) from exc
            return self._share_support

    def existing(self, group: str, topic: str) -> TopicConsumer | None:
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
