"""The registry's moving parts in one object: the replayed state, the `_schemas` store, the election, and
the write path (plan -> append -> read back -> check it landed)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.registry import errors
from sluice.registry.catalog import Catalog
from sluice.registry.commands import Plan
from sluice.registry.election import DEFAULT_GROUP, DEFAULT_SESSION_TIMEOUT_MS, Election
from sluice.registry.state import RegistryState
from sluice.state_topic.kafka import KafkaStateTopic, StoreUnavailable

log = logging.getLogger("sluice.registry")

DEFAULT_TOPIC = "_schemas"
# A write re-planned this many times because another primary's records kept winning gives up (50001).
MAX_PLAN_ATTEMPTS = 10


@dataclass
class RegistrySettings:
    """What `sluice registry` and `sluice serve` configure."""

    kafka: Mapping[str, str]  # librdkafka settings: bootstrap.servers, security.protocol, sasl.*, ssl.*
    topic: str = DEFAULT_TOPIC
    group: str = DEFAULT_GROUP
    store_timeout_s: float = 5.0
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    replication_factor: int = 3
    max_request_bytes: int = 4 * 1024 * 1024


class RegistryService:
    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings
        self.state = RegistryState()
        self.catalog = Catalog(self.state)
        self.store = KafkaStateTopic(
            settings.kafka,
            settings.topic,
            self.state,
            timeout_s=settings.store_timeout_s,
            client_id="sluice-registry",
            replication_factor=settings.replication_factor,
        )
        self.election: Election | None = None
        self._write_lock = asyncio.Lock()
        self._cluster_id: str | None = None
        self.ready = False  # set once _schemas is replayed: requests before that get 503

    async def start(self, my_url: str) -> None:
        """Replay `_schemas`, then stand for primary. StoreUnavailable when Kafka cannot be reached."""
        await self.store.start()
        self.election = Election(
            self.settings.kafka,
            self.settings.topic,
            my_url,
            group=self.settings.group,
            timeout_s=self.settings.store_timeout_s,
            session_timeout_ms=self.settings.session_timeout_ms,
        )
        self.election.start()
        self.ready = True
        log.info(
            "registry replayed %s: %d subjects, next id %d",
            self.settings.topic,
            len(self.state.subjects),
            self.state.next_id,
        )

    async def kafka_cluster_id(self) -> str:
        """The Kafka cluster's id (asked once, then kept). StoreUnavailable when Kafka does not answer."""
        if self._cluster_id is None:
            self._cluster_id = await asyncio.get_running_loop().run_in_executor(None, self._describe_cluster)
        return self._cluster_id

    def _describe_cluster(self) -> str:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        timeout = self.settings.store_timeout_s
        admin = AdminClient({**self.settings.kafka, "client.id": "sluice-registry"})
        try:
            return str(admin.describe_cluster(request_timeout=timeout).result(timeout).cluster_id or "")
        except KafkaException as exc:
            raise StoreUnavailable(f"cannot describe the Kafka cluster: {exc.args[0]}") from None

    async def stop(self) -> None:
        if self.election is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.election.stop)
        await self.store.close()

    @property
    def is_primary(self) -> bool:
        return self.election is not None and self.election.is_primary

    async def primary_url(self) -> str | None:
        """The primary's URL, waiting (within the store timeout) for an election that is still running."""
        if self.election is None:
            return None
        election = self.election
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.store_timeout_s
        while True:
            url = await loop.run_in_executor(None, election.primary_url)
            if url is not None or loop.time() >= deadline:
                return url
            await asyncio.sleep(0.1)

    async def write(self, plan: Callable[[], Plan]) -> Any:
        """Run one write command: plan on the caught-up state, append, and answer once it is read back."""
        async with self._write_lock:
            for attempt in range(MAX_PLAN_ATTEMPTS):
                try:
                    await self.store.sync()
                    planned = plan()
                    if not planned.records:
                        return planned.answer
                    await self.store.append(planned.records)
                except StoreUnavailable as exc:
                    raise unavailable(str(exc)) from None
                if planned.landed(self.state):
                    return planned.answer
                log.warning("a concurrent writer's records won; planning the write again")
                # Two writers that keep colliding step apart: a random pause breaks the lockstep.
                await asyncio.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
            raise errors.store_error("the write kept losing to another registry's writes; try again")


def unavailable(reason: str) -> errors.RegistryError:
    """Kafka cannot be reached: 503 (error_code 50003), so clients and load balancers retry elsewhere."""
    return errors.RegistryError(503, 50003, f"the schema store (Kafka) is unavailable: {reason}")
