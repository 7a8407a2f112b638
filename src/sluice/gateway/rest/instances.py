"""v2 consumer instances: one confluent-kafka Consumer each, owned by this gateway process.

At least once: offsets are stored only for records a caller has been handed (never for records fetched
and buffered but not yet returned), and commits — explicit, or librdkafka's auto commit of stored
offsets — go to Kafka, so a gateway that dies loses no commit; its instances die with it and their
callers get 40403 and create new ones, which resume from the committed offsets. Another gateway
behind the same load balancer knows nothing of this one's instances and answers 40403 for them too.
Idle instances are closed after `consumer.instance.timeout.ms`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import operator
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from sluice.client.stuck import stuck_at

from ..config import FETCH_QUEUE_BACKOFF_MS, ClusterConfig
from .errors import (
    CONSUMER_ALREADY_EXISTS,
    CONSUMER_INSTANCE_NOT_FOUND,
    INVALID_CONSUMER_CONFIG,
    RestError,
    kafka_error,
    not_found,
    unprocessable,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_INSTANCE_TIMEOUT_MS = 300_000
DEFAULT_REQUEST_TIMEOUT_MS = 1_000
MAX_REQUEST_TIMEOUT_MS = 30_000
MAX_INSTANCES = 1_000
# How many records one fetch from librdkafka takes at most; what a caller does not take stays buffered.
FETCH_BATCH = 5_000
POLL_SLICE_SECONDS = 0.5
CLOSE_TIMEOUT_SECONDS = 10.0
# How long GET .../subscription waits for the topic list a pattern subscription is matched against.
MATCH_TIMEOUT_SECONDS = 10.0
# What a pattern never matches (the Java consumer's exclude.internal.topics=true).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_SUBSCRIPTION_CONFLICT = 40903
# What Confluent's proxy answers (40903, "Illegal state: " and the Java consumer's IllegalStateException) when a
# consumer subscribed or assigned one way is asked to take its partitions another way.
_MIXED_SUBSCRIPTION = "Illegal state: Subscription to topics, partitions and pattern are mutually exclusive"


@dataclass
class InstanceSettings:
    fmt: str = "binary"
    auto_offset_reset: str = "latest"
    auto_commit: bool = True
    fetch_min_bytes: int = 1
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise RestError(422, INVALID_CONSUMER_CONFIG, f"{name} must be true or false")


def _positive(value: Any, name: str, upper: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise RestError(422, INVALID_CONSUMER_CONFIG, f"{name} must be an integer") from None
    if not 0 <= number <= upper:
        raise RestError(422, INVALID_CONSUMER_CONFIG, f"{name} must be between 0 and {upper}")
    return number


def settings_from(body: dict[str, Any], formats: tuple[str, ...]) -> InstanceSettings:
    settings = InstanceSettings()
    fmt = body.get("format", "binary")
    if not isinstance(fmt, str) or fmt.lower() not in formats:
        raise RestError(422, INVALID_CONSUMER_CONFIG, f"format must be one of {', '.join(formats)}")
    settings.fmt = fmt.lower()
    reset = body.get("auto.offset.reset")
    if reset is not None:
        if reset not in ("earliest", "latest", "none", "smallest", "largest"):
            raise RestError(
                422, INVALID_CONSUMER_CONFIG, "auto.offset.reset must be earliest, latest or none"
            )
        settings.auto_offset_reset = {"smallest": "earliest", "largest": "latest", "none": "error"}.get(
            reset, reset
        )
    if body.get("auto.commit.enable") is not None:
        settings.auto_commit = _flag(body["auto.commit.enable"], "auto.commit.enable")
    if body.get("fetch.min.bytes") is not None:
        settings.fetch_min_bytes = max(1, _positive(body["fetch.min.bytes"], "fetch.min.bytes", 100_000_000))
    if body.get("consumer.request.timeout.ms") is not None:
        settings.request_timeout_ms = _positive(
            body["consumer.request.timeout.ms"], "consumer.request.timeout.ms", MAX_REQUEST_TIMEOUT_MS
        )
    return settings


METADATA_WARM_SECONDS = 5.0


@dataclass
class ConsumerInstance:
    group: str
    name: str
    settings: InstanceSettings
    consumer: Consumer
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Fetched, not yet handed to a caller: touched only by calls holding `lock` (in the executor).
    buffer: list[Message] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    pattern: str = ""
    assigned: list[tuple[str, int]] = field(default_factory=list)
    # An assignment not yet handed to librdkafka, with the offsets seeks gave it. librdkafka starts fetching at
    # once (from the committed or reset offset, where a partition at its end long-polls for fetch.wait.max.ms),
    # so a seek right after an assign waited out that fetch. Java's consumer assigns lazily, at the first poll;
    # so does this, at the first read.
    pending_offsets: dict[tuple[str, int], int] | None = None
    closed: bool = False
    # Counts seeks, assignments and revocations: what was handed out under an older one cannot be given back.
    generation: int = 0

    def drop_buffered(self, partitions: set[tuple[str, int]] | None = None) -> None:
        self.generation += 1  # records handed out before this are not put back (they would be stale)
        if partitions is None:
            self.buffer.clear()
        else:
            self.buffer = [m for m in self.buffer if (m.topic(), m.partition()) not in partitions]

    def held(self) -> list[tuple[str, int]]:
        """The partitions this instance holds: its assignment, handed to librdkafka or not yet."""
        if self.pending_offsets is not None:
            return list(self.assigned)
        return [(tp.topic, tp.partition) for tp in self.consumer.assignment()]

    def start_fetching(self) -> None:
        """Hand a pending assignment to librdkafka, at the offsets seeks chose (else committed, else reset)."""
        wanted, self.pending_offsets = self.pending_offsets, None
        if wanted is not None:
            self.consumer.assign(
                [TopicPartition(t, p, wanted.get((t, p), OFFSET_INVALID)) for t, p in self.assigned]
            )

    def take(self, timeout: float, max_bytes: int) -> tuple[list[Message], int]:
        """Up to `max_bytes` of records (at least one when any arrived within `timeout`), and the generation they
        belong to. They count as consumed only once `confirm`ed (their answer was written), else `give_back`."""
        self.start_fetching()
        if not self.buffer:
            # What librdkafka already holds, at once; else wait for the first record and take what came with it
            # (one consume(n, timeout) call would wait for all n or the whole timeout).
            fetched = self.consumer.consume(FETCH_BATCH, 0)
            deadline = time.monotonic() + timeout
            # In slices, so that deleting the instance (or a shutdown) does not wait out a long poll.
            while not fetched and not self.closed and (left := deadline - time.monotonic()) > 0:
                fetched = self.consumer.consume(1, min(left, POLL_SLICE_SECONDS))
                if fetched:
                    fetched.extend(self.consumer.consume(FETCH_BATCH - 1, 0))
            # No error among them (most fetches), checked in C by identity: KafkaError's == against None
            # fails (a SystemError out of list.count).
            if not any(map(operator.is_not, map(Message.error, fetched), itertools.repeat(None))):
                self.buffer += fetched
            else:
                stuck = self._keep_records(fetched)
                if stuck is not None and not self.buffer:
                    # As Kafka's Java consumer does: what came before the damage is handed out first, then
                    # reading stops there with an error, until the caller seeks past it.
                    raise kafka_error(f"{stuck}. Seek past it (POST .../positions) to go on.")
        buffer = self.buffer
        taken = _fitting(buffer, max_bytes)
        handed, self.buffer = buffer[:taken], buffer[taken:]
        return handed, self.generation

    def _keep_records(self, fetched: list[Message]) -> str | None:
        """The records of a fetch that also brought errors: a fatal one fails the instance, others are logged.
        Returns where a partition cannot be read past an offset (`stuck_at`), if one cannot."""
        damaged = None
        for message in fetched:
            error = message.error()
            if error is None:
                self.buffer.append(message)
            elif error.fatal():
                raise kafka_error(f"consumer failed: {error.str()}")
            elif (stuck := stuck_at(message)) is not None:
                damaged = f"{message.topic()}-{message.partition()} {stuck}"
            elif error.code() != KafkaError._PARTITION_EOF:
                log.info("consumer %s/%s: %s", self.group, self.name, error.str())
        return damaged

    def confirm(self, handed: list[Message], last: dict[tuple[str, int], int] | None = None) -> None:
        """Store the offsets after `handed` (what a commit, or auto commit, then writes to Kafka); `last`, the
        last offset of each partition in it, where the caller already knows them."""
        if last is None:
            last = {}
            for message in handed:
                last[(message.topic(), message.partition())] = message.offset()
        if last:
            with contextlib.suppress(KafkaException):  # a partition revoked meanwhile: not ours to store
                self.consumer.store_offsets(
                    offsets=[TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
                )

    def give_back(self, handed: list[Message], generation: int) -> None:
        """Records whose answer never reached the caller: the next fetch hands them out again."""
        if generation == self.generation:
            self.buffer[:0] = handed


def _fitting(records: list[Message], max_bytes: int) -> int:
    """How many leading records go in an answer of `max_bytes` (keys and values counted): the first always
    goes, then as many as fit. All of them when their total fits (most answers: summed in C, 91 ns per record
    against 218 for a Python loop over them in a micro-benchmark); else by bisecting the running total (the
    length_hint of a null key or value is 0)."""
    if not records:
        return 0
    values, keys = list(map(Message.value, records)), list(map(Message.key, records))
    if sum(map(len, filter(None, values))) + sum(map(len, filter(None, keys))) <= max_bytes:
        return len(records)
    sizes = itertools.accumulate(
        map(operator.add, map(operator.length_hint, values), map(operator.length_hint, keys))
    )
    return max(bisect.bisect_right(list(sizes), max_bytes), 1)


class ConsumerInstances:
    def __init__(
        self, cluster: ClusterConfig, client_id: str, instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS
    ) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.instance_timeout = instance_timeout_ms / 1000
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        # Blocking librdkafka calls (fetches wait up to their timeout) must not starve asyncio.to_thread.
        self._executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="rest-consumer")
        self._janitor: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._janitor = asyncio.create_task(self._expire_idle_forever())

    async def close(self) -> None:
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
        # All at once: with the cluster gone each close may take its whole CLOSE_TIMEOUT_SECONDS.
        await asyncio.gather(*(self.delete(i.group, i.name) for i in list(self._instances.values())))
        self._executor.shutdown(wait=False)

    def __len__(self) -> int:
        return len(self._instances)

    # -- lifecycle ----------------------------------------------------------------
    async def create(self, group: str, name: str | None, settings: InstanceSettings) -> ConsumerInstance:
        if name is None:
            name = f"rest-consumer-{uuid.uuid4()}"
        elif not _NAME.match(name):
            raise unprocessable(
                "name must be 1-200 of letters, digits, '.', '_' and '-'", INVALID_CONSUMER_CONFIG
            )
        if (group, name) in self._instances:
            raise RestError(409, CONSUMER_ALREADY_EXISTS, f"Consumer {name} already exists in group {group}.")
        if len(self._instances) >= MAX_INSTANCES:
            raise RestError(429, 42901, f"this gateway already runs {MAX_INSTANCES} consumer instances")
        config = {
            # As the gateway's other consumers (a caller reading a backlog of more than 100,000 records waited out
            # most of librdkafka's default second at each refill); -X overrides it.
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            **self.cluster.client_config(),
            "group.id": group,
            "client.id": f"{self.client_id}-{name}"[:250],
            "enable.auto.commit": settings.auto_commit,
            "enable.auto.offset.store": False,
            "auto.offset.reset": settings.auto_offset_reset,
            "fetch.min.bytes": settings.fetch_min_bytes,
            "enable.partition.eof": False,
        }
        try:
            consumer = Consumer(config)
        except KafkaException as exc:
            raise RestError(422, INVALID_CONSUMER_CONFIG, f"cannot create consumer: {exc}") from None
        instance = ConsumerInstance(group, name, settings, consumer)
        self._instances[(group, name)] = instance
        return instance

    def get(self, group: str, name: str) -> ConsumerInstance:
        instance = self._instances.get((group, name))
        if instance is None:
            raise not_found(CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
        instance.last_used = time.monotonic()
        return instance

    async def delete(self, group: str, name: str) -> None:
        instance = self._instances.pop((group, name), None)
        if instance is None:
            raise not_found(CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
        # A fetch in progress notices within POLL_SLICE_SECONDS and lets go of the lock.
        instance.closed = True
        async with instance.lock:
            # close() commits what auto commit would and leaves the group at once, or hangs when the cluster
            # is gone: in a daemon thread, waited for a bounded time, it never holds up a shutdown.
            closed = asyncio.get_running_loop().create_future()
            threading.Thread(
                target=_close_quietly, args=(instance, closed), name=f"close-{instance.name}", daemon=True
            ).start()
            try:
                await asyncio.wait_for(closed, CLOSE_TIMEOUT_SECONDS)
            except TimeoutError:
                log.warning(
                    "consumer %s/%s did not close within %ss",
                    instance.group,
                    instance.name,
                    CLOSE_TIMEOUT_SECONDS,
                )

    async def expire_idle(self) -> int:
        deadline = time.monotonic() - self.instance_timeout
        idle = [i for i in self._instances.values() if i.last_used < deadline and not i.lock.locked()]
        for instance in idle:
            log.info("consumer instance %s/%s expired", instance.group, instance.name)
            with contextlib.suppress(RestError):
                await self.delete(instance.group, instance.name)
        return len(idle)

    async def _expire_idle_forever(self) -> None:
        period = min(max(self.instance_timeout / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(period)
            try:
                await self.expire_idle()
            except Exception:  # a janitor that dies would leak every idle instance
                log.exception("expiring consumer instances failed")

    # -- calls on one instance ------------------------------------------------------
    async def run(
        self, instance: ConsumerInstance, work: Callable[[], T], what: str, *, blocking: bool = True
    ) -> T:
        """`work` in the executor (or, if it cannot block, on the loop: no thread hand-off), one call per instance
        at a time; Kafka errors become 50002."""
        async with instance.lock:
            if instance.closed:
                raise not_found(CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
            try:
                if not blocking:
                    return work()
                return await asyncio.get_running_loop().run_in_executor(self._executor, work)
            except KafkaException as exc:
                raise kafka_error(f"{what}: {exc.args[0].str() if exc.args else exc}") from None
            finally:
                instance.last_used = time.monotonic()

    async def subscribe(self, instance: ConsumerInstance, topics: list[str], pattern: str) -> None:
        if instance.assigned or (instance.pattern and topics) or (instance.topics and pattern):
            raise RestError(409, _SUBSCRIPTION_CONFLICT, _MIXED_SUBSCRIPTION)

        def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            instance.drop_buffered({(p.topic, p.partition) for p in partitions})

        def subscribe() -> None:
            instance.drop_buffered()
            instance.consumer.subscribe(
                topics or [pattern if pattern.startswith("^") else f"^{pattern}"],
                on_revoke=on_revoke,
                on_lost=on_revoke,
            )
            instance.topics, instance.pattern = list(topics), pattern

        await self.run(instance, subscribe, "subscribe")

    async def subscription(self, instance: ConsumerInstance) -> list[str]:
        """The subscribed topics: those named, or (as Java's KafkaConsumer.subscription() after a pattern
        subscribe) the topics the pattern now matches whole, internal ones left out."""
        if not instance.pattern:
            return list(instance.topics)
        pattern = re.compile(instance.pattern)

        def matched() -> list[str]:
            topics = instance.consumer.list_topics(timeout=MATCH_TIMEOUT_SECONDS).topics
            return sorted(t for t in topics if pattern.fullmatch(t) and t not in INTERNAL_TOPICS)

        return await self.run(instance, matched, "subscription")

    async def unsubscribe(self, instance: ConsumerInstance) -> None:
        def unsubscribe() -> None:
            instance.consumer.unsubscribe()
            instance.drop_buffered()
            instance.topics, instance.pattern = [], ""

        await self.run(instance, unsubscribe, "unsubscribe")

    async def assign(self, instance: ConsumerInstance, partitions: list[tuple[str, int]]) -> None:
        if instance.topics or instance.pattern:
            raise RestError(409, _SUBSCRIPTION_CONFLICT, _MIXED_SUBSCRIPTION)

        def assign() -> None:
            instance.drop_buffered()
            if instance.pending_offsets is None:
                instance.consumer.unassign()  # what it fetched for the old assignment stops now
            # librdkafka assigned a partition whose leader it does not know yet retries its offset look-up on a
            # 500 ms timer, even when the metadata comes back a millisecond later: know the leaders first.
            for topic in sorted({t for t, _ in partitions}):
                try:
                    instance.consumer.list_topics(topic, timeout=METADATA_WARM_SECONDS)
                except KafkaException:
                    break  # best effort: the first read finds out anyway; no wait per topic on a cluster gone
            instance.assigned = list(partitions)
            instance.pending_offsets = {}

        await self.run(instance, assign, "assign")

    async def assignment(self, instance: ConsumerInstance) -> list[tuple[str, int]]:
        return await self.run(instance, instance.held, "assignment")

    async def seek(self, instance: ConsumerInstance, positions: list[tuple[str, int, int]]) -> None:
        """Move to offsets (or OFFSET_BEGINNING / OFFSET_END) of partitions the instance holds."""

        def seek() -> None:
            held = set(instance.held())
            missing = [(t, p) for t, p, _ in positions if (t, p) not in held]
            if missing:
                # Java's consumer.seek() on a partition it does not hold: IllegalStateException, which
                # Confluent's proxy answers 409/40903 in the consumer's words.
                topic, partition = missing[0]
                raise RestError(
                    409,
                    _SUBSCRIPTION_CONFLICT,
                    f"Illegal state: No current assignment for partition {topic}-{partition}",
                )
            instance.drop_buffered({(t, p) for t, p, _ in positions})
            if instance.pending_offsets is not None:
                instance.pending_offsets.update({(t, p): o for t, p, o in positions})
            elif instance.assigned:
                # Re-assigning with offsets works while librdkafka still looks up where to start, where seek()
                # would not. The other partitions go on from where they are (their position: past what is
                # buffered, which stays), not from their committed offset.
                wanted = {(t, p): o for t, p, o in positions}
                at = {
                    (tp.topic, tp.partition): tp.offset
                    for tp in instance.consumer.position([TopicPartition(t, p) for t, p in instance.assigned])
                }
                instance.consumer.assign(
                    [
                        TopicPartition(t, p, wanted.get((t, p), at.get((t, p), OFFSET_INVALID)))
                        for t, p in instance.assigned
                    ]
                )
            else:
                for topic, partition, offset in positions:
                    instance.consumer.seek(TopicPartition(topic, partition, offset))

        await self.run(instance, seek, "seek")

    async def records(
        self, instance: ConsumerInstance, timeout_ms: int | None, max_bytes: int
    ) -> tuple[list[Message], int]:
        timeout = (instance.settings.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        # What librdkafka already holds is taken on the loop; only waiting for more goes to a thread.
        handed, generation = await self.run(
            instance, lambda: instance.take(0, max_bytes), "fetch records", blocking=False
        )
        if handed or timeout <= 0:
            return handed, generation
        return await self.run(instance, lambda: instance.take(timeout, max_bytes), "fetch records")

    async def confirm(
        self,
        instance: ConsumerInstance,
        handed: list[Message],
        last: dict[tuple[str, int], int] | None = None,
    ) -> None:
        if handed:  # storing offsets is local to librdkafka: it never blocks
            await self.run(instance, lambda: instance.confirm(handed, last), "store offsets", blocking=False)

    async def give_back(self, instance: ConsumerInstance, handed: list[Message], generation: int) -> None:
        if handed:
            async with instance.lock:
                instance.give_back(handed, generation)

    async def commit(
        self, instance: ConsumerInstance, offsets: list[tuple[str, int, int, str]] | None
    ) -> None:
        """Commit what was handed out (None), or the named last-consumed offsets: Kafka gets offset + 1."""

        def commit() -> None:
            try:
                if offsets is None:
                    instance.consumer.commit(asynchronous=False)
                else:
                    instance.consumer.commit(
                        offsets=[
                            TopicPartition(t, p, o + 1, metadata=m) if m else TopicPartition(t, p, o + 1)
                            for t, p, o, m in offsets
                        ],
                        asynchronous=False,
                    )
            except KafkaException as exc:
                if exc.args and exc.args[0].code() == KafkaError._NO_OFFSET:
                    return  # nothing consumed yet: nothing to commit
                raise

        await self.run(instance, commit, "commit offsets")

    async def committed(
        self, instance: ConsumerInstance, partitions: list[tuple[str, int]]
    ) -> list[TopicPartition]:
        return await self.run(
            instance,
            lambda: instance.consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=10),
            "committed offsets",
        )


def _close_quietly(instance: ConsumerInstance, closed: asyncio.Future[None]) -> None:
    try:
        instance.consumer.close()
    except (KafkaException, RuntimeError) as exc:
        log.warning("closing consumer %s/%s: %s", instance.group, instance.name, exc)
    loop = closed.get_loop()
    with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
        loop.call_soon_threadsafe(lambda: closed.done() or closed.set_result(None))


__all__ = ["OFFSET_BEGINNING", "OFFSET_END", "ConsumerInstance", "ConsumerInstances", "settings_from"]
