"""The Kafka-client backend of a state topic: a topic of any Kafka cluster, for a service that talks to
Kafka as a client (the schema registry's `_schemas`); the contract is sluice.state_topic.api.

Several processes may share the topic, so the log runs ahead of the machine: on start the topic is
created if missing, replayed from the beginning into the machine, and then tailed, so every process
converges on the same state. A writer plans on the caught-up machine (`sync`), appends the records
(`append`: acks=all and idempotence), and is answered once this process's reader has applied them
(read-your-writes): a caller that appends, then reads the machine, sees its own write.

Threads: librdkafka's reader and delivery callbacks run on two small threads; every `apply` runs on the
asyncio loop, so the machine and everything reading it live on one thread and need no locks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.stuck import stuck_at
from sluice.state_topic.api import KeyValue, OffsetRecord, StateMachine, StateTopic, topic_config

log = logging.getLogger("sluice.state_topic")

POLL_S = 0.1


class StoreUnavailable(Exception):
    """Kafka did not answer within the store timeout (broker down, topic gone, not authorized...)."""


class KafkaStateTopic(StateTopic):
    def __init__(
        self,
        settings: Mapping[str, str],
        topic: str,
        machine: StateMachine,
        *,
        timeout_s: float = 5.0,
        client_id: str = "sluice-state-topic",
        replication_factor: int = 3,
    ) -> None:
        super().__init__(topic, machine)
        self.settings = dict(settings)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.replication_factor = replication_factor
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._offsets: Consumer | None = None
        # Why the reader cannot go on, if it cannot (`stuck_at`): named in what waiting for the topic raises.
        self.unreadable = ""
        # Writers and readers waiting until the machine has applied everything below an offset.
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    # -- life cycle -----------------------------------------------------------------------------------------

    async def start(self, start_timeout_s: float = 30.0) -> None:
        """Create the topic if needed, replay it to its end (then the machine is `loaded`, and what that
        returns appended), then keep tailing. StoreUnavailable on timeout."""
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, self._ensure_topic)
        self._producer = Producer(
            {
                **self.settings,
                "client.id": self.client_id,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": max(1000, int(self.timeout_s * 1000)),
            }
        )
        self._consumer = Consumer(
            {
                **self.settings,
                "client.id": self.client_id,
                # Never joins: the partition is assigned by hand; the id is only required by librdkafka.
                "group.id": f"{self.client_id}-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                # Should the position ever fall outside the log (the topic re-created, say), start over from
                # the beginning rather than skip to the end: a state machine must see every record.
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
                "isolation.level": "read_committed",
            }
        )
        self._consumer.assign([TopicPartition(self.name, 0, OFFSET_BEGINNING)])
        # End offsets are asked on a handle of their own: asking the one a thread is consuming from blocks.
        self._offsets = Consumer(
            {**self.settings, "client.id": self.client_id, "group.id": f"{self.client_id}-offsets"}
        )
        for target in (self._read_loop, self._delivery_loop):
            thread = threading.Thread(target=target, name=f"{self.name}-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)
        # A topic just created may have no leader for a moment: keep asking until start_timeout_s (but not
        # past a batch that cannot be read: asking again will not get past it).
        deadline = self._loop.time() + start_timeout_s
        while True:
            try:
                await self.sync()
                break
            except StoreUnavailable:
                if self.unreadable or self._loop.time() >= deadline:
                    await self.close()
                    raise
                await asyncio.sleep(0.2)
        records = self.machine.loaded(int(time.time() * 1000))
        if records:
            await self.append(records)

    def _ensure_topic(self) -> None:
        admin = AdminClient({**self.settings, "client.id": self.client_id})
        try:
            metadata = admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise StoreUnavailable(f"cannot reach Kafka: {exc.args[0]}") from None
        if self.name in metadata.topics and metadata.topics[self.name].error is None:
            return
        replicas = max(1, min(self.replication_factor, len(metadata.brokers)))
        new = NewTopic(self.name, 1, replicas, config=topic_config())
        try:
            admin.create_topics([new], request_timeout=self.timeout_s)[self.name].result(self.timeout_s)
            log.info("created %s (1 partition, compacted, replication factor %d)", self.name, replicas)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise StoreUnavailable(f"cannot create {self.name}: {exc.args[0]}") from None

    async def close(self) -> None:
        self._stop.set()
        loop = asyncio.get_running_loop()
        for thread in self._threads:
            await loop.run_in_executor(None, thread.join, 5)
        for consumer in (self._consumer, self._offsets):
            if consumer is not None:
                await loop.run_in_executor(None, consumer.close)
        if self._producer is not None:
            await loop.run_in_executor(None, self._producer.flush, 1)
        waiting, self._waiting = self._waiting, []
        for _, waiter in waiting:
            if not waiter.done():
                waiter.set_exception(StoreUnavailable("closed"))

    # -- reading --------------------------------------------------------------------------------------------

    def _read_loop(self) -> None:
        assert self._consumer is not None and self._loop is not None
        while not self._stop.is_set():
            try:
                # poll wakes at the first record; consume(n, 0) then takes what else is already here.
                first = self._consumer.poll(POLL_S)
                batch = [] if first is None else [first, *self._consumer.consume(499, 0)]
            except KafkaException as exc:
                log.warning("reading %s: %s", self.name, exc)
                continue
            found = []
            for message in batch:
                error = message.error()
                if error is None:
                    found.append((message.offset(), message.key(), message.value()))
                elif (stuck := stuck_at(message)) is not None:
                    self._note_unreadable(f"{self.name} {stuck}")
                elif error.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading %s: %s", self.name, error)
            if found:
                self._loop.call_soon_threadsafe(self._apply_batch, found)

    def _note_unreadable(self, unreadable: str) -> None:
        if unreadable != self.unreadable:  # once, not at every refetch
            log.error("%s", unreadable)
            self.unreadable = unreadable

    def _apply_batch(self, batch: Sequence[OffsetRecord]) -> None:
        self.replay(batch)
        ready = [w for t, w in self._waiting if self.applied >= t]
        if ready:
            self._waiting = [(t, w) for t, w in self._waiting if self.applied < t]
        for waiter in ready:
            if not waiter.done():
                waiter.set_result(None)

    async def _applied_through(self, target: int, timeout_s: float) -> None:
        """Wait until everything below offset `target` is in the machine (the read-your-writes rule)."""
        assert self._loop is not None
        if self.applied >= target:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiting.append((target, waiter))
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            self._waiting = [(t, w) for t, w in self._waiting if w is not waiter]
            stuck = f"; {self.unreadable}" if self.unreadable else ""
            raise StoreUnavailable(
                f"{self.name} was not read back to offset {target} within {timeout_s:g}s (at {self.applied})"
                + stuck
            ) from None

    async def sync(self) -> None:
        """Wait until everything written to the topic so far (by anyone) is in the machine."""
        assert self._loop is not None and self._offsets is not None
        consumer = self._offsets
        try:
            _, high = await asyncio.wait_for(
                self._loop.run_in_executor(
                    None,
                    lambda: consumer.get_watermark_offsets(
                        TopicPartition(self.name, 0), self.timeout_s, False
                    ),
                ),
                self.timeout_s + 1,
            )
        except KafkaException as exc:
            raise StoreUnavailable(f"cannot read {self.name}'s end offset: {exc.args[0]}") from None
        except TimeoutError:
            raise StoreUnavailable(
                f"Kafka did not tell {self.name}'s end offset within {self.timeout_s:g}s"
            ) from None
        await self._applied_through(high, self.timeout_s)

    # -- writing --------------------------------------------------------------------------------------------

    def _delivery_loop(self) -> None:
        assert self._producer is not None
        while not self._stop.is_set():
            self._producer.poll(POLL_S)

    async def append(self, batch: Sequence[KeyValue]) -> int:
        """Produce the records in order; return once all are applied here. The last one's offset."""
        assert self._loop is not None and self._producer is not None
        loop = self._loop
        futures: list[asyncio.Future[int]] = []
        for key, value in batch:
            future: asyncio.Future[int] = loop.create_future()

            def delivered(
                error: KafkaError | None, message: object, future: asyncio.Future[int] = future
            ) -> None:
                loop.call_soon_threadsafe(_settle, future, error, message)

            try:
                self._producer.produce(self.name, value, key, partition=0, on_delivery=delivered)
            except (BufferError, KafkaException) as exc:
                raise StoreUnavailable(f"cannot write to {self.name}: {exc}") from None
            futures.append(future)
        try:
            offsets = await asyncio.wait_for(asyncio.gather(*futures), self.timeout_s + 1)
        except TimeoutError:
            raise StoreUnavailable(
                f"no acknowledgement from Kafka for {self.name} within {self.timeout_s:g}s"
            ) from None
        last = max(offsets)
        await self._applied_through(last + 1, self.timeout_s)
        return last


def _settle(future: asyncio.Future[int], error: KafkaError | None, message: object) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(StoreUnavailable(f"Kafka refused the write: {error.str()}"))
    else:
        future.set_result(message.offset())  # type: ignore[attr-defined]
