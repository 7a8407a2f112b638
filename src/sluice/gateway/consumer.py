"""Group consumers: one confluent-kafka Consumer per (cluster, group, topic).

Each consumer is an ordinary member of the Kafka consumer group, so several
gateways and plain Kafka consumers can share a group. Its thread owns the
librdkafka handle (poll, rebalance callbacks, commits); the event loop side
only touches the pure `GroupTopicCore` under a lock. Waiting callers queue a
future each; a fetch or an ack wakes the first in line (see `_signal`).

Dead letters are produced from the event loop. With a dead-letter topic the
core holds each one un-acked until its produce is confirmed, so that a failed
produce or a crash in between never moves the commit point past a message that
nobody acknowledged; failed produces are retried (the core says when).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import threading
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as Record

from .batches import Batch, Message
from .config import ClusterConfig
from .consumer_base import DeadLetterSink, TopicConsumer
from .core import GroupTopicCore
from .errors import GatewayError, not_handed_out
from .fetched import UnreadablePartitions, batches_of
from .flow import FlowControl, buffer_high_water
from .metrics import GatewayMetrics
from .tracker import AckOutcome, TrackerSettings

log = logging.getLogger(__name__)

# Most messages one consume() call takes. Every call costs the same again whatever it returns (the fetch,
# the lock, waking the event loop): 2,000 per call measured ~1.1-1.4x the stream rate of 500. What one call
# can return is bounded in bytes by librdkafka's own queue (queued.max.messages.kbytes).
_FETCH_BATCH = 2000
_POLL_SECONDS = 0.1
_PAUSED_POLL_SECONDS = 0.005
_HOLD_POLL_SECONDS = 0.002
_KAFKA_TIMEOUT_SECONDS = 10.0


_error = Record.error


class GroupTopicConsumer(TopicConsumer):
    def __init__(
        self,
        cluster: ClusterConfig,
        group: str,
        topic: str,
        client_id: str,
        metrics: GatewayMetrics,
        dead_letter_sink: DeadLetterSink | None = None,
    ) -> None:
        super().__init__(cluster, group, topic, client_id, metrics, dead_letter_sink)
        self.core = GroupTopicCore(
            TrackerSettings(
                ack_timeout=self.settings.ack_timeout,
                max_pending=self.settings.max_pending_messages,
                max_retries=self.settings.max_retries,
                # Without a sink there is nothing that could ever confirm a dead letter.
                hold_dead_letters=dead_letter_sink is not None,
            )
        )
        self.member_id = ""
        self._pauses_metric = metrics.partition_pauses.labels(cluster.name, group, topic)
        self._stopping = threading.Event()
        self._unreadable = UnreadablePartitions(topic)
        # Running estimate of one buffered message's size, from one sample per fetch (measuring every
        # message would cost more than the estimate is worth).
        self._message_bytes = 1024.0
        strategy = str(cluster.client_config().get("partition.assignment.strategy", ""))
        # Cooperative rebalancing hands over only the partitions that move, and
        # librdkafka then wants the incremental calls instead of assign/unassign.
        self._cooperative = "cooperative" in strategy
        self._thread = threading.Thread(target=self._run, name=f"gw-consumer-{group}-{topic}", daemon=True)
        self._thread.start()

    # -- event loop side -------------------------------------------------------
    @property
    def assigned_partitions(self) -> list[int]:
        with self._lock:
            return sorted(self.core.trackers)

    def _pending_count(self) -> int:
        # Held dead letters count too: their confirmation should reach the commit before we leave.
        return self.core.pending_count() + self.core.parked_count()

    def _ack_timeout(self) -> float:
        return self.settings.ack_timeout

    def _next_wake(self) -> float | None:
        return self.core.next_deadline()  # the next redelivery

    def _empty_failure(self) -> GatewayError | None:
        return self._unreadable.failure()

    def ack_many(self, acks: Sequence[tuple[int, int]], ranges: Sequence[tuple[int, int, int]] = ()) -> None:
        """Acknowledge single offsets (partition, offset) and ranges (partition, begin, end).

        All valid acks are applied; the first offset this gateway never handed out is then
        reported as INVALID_ARGUMENT.
        """
        self.last_used = time.monotonic()
        acked = 0
        bad: tuple[int, int] | None = None
        with self._lock:
            for partition, offset in acks:
                outcome = self.core.ack(partition, offset)
                if outcome is AckOutcome.ACKED:
                    acked += 1
                elif outcome is AckOutcome.NOT_HANDED_OUT and bad is None:
                    bad = (partition, offset)
            for partition, begin, end in ranges:
                newly, missing = self.core.ack_range(partition, begin, end)
                acked += newly
                if missing and bad is None:
                    bad = (partition, begin)
        if acked:
            self._acked_metric.inc(acked)
            self._signal()
        if bad is not None:
            raise not_handed_out(self.group, self.topic, bad, bool(ranges))

    def _take(
        self, max_messages: int, auto_ack: bool, max_pending: int | None, max_bytes: int | None
    ) -> tuple[list[Batch], bool]:
        now = time.monotonic()
        with self._lock:
            batches = self.core.take_batches(now, max_messages, max_pending, max_bytes)
            # Looked at under the same lock, and only when somebody waits to be told.
            more_waiting = bool(self._wakeups) and self.core.has_waiting(now)
            if auto_ack:
                for batch in batches:
                    for offset in batch.offsets:
                        self.core.ack(batch.partition, offset)
            dead_letters = self.core.take_dead_letters()
        if batches:
            self._count_handed_out(batches)
        if dead_letters:
            self._park_dead_letters(dead_letters)
        return batches, more_waiting

    def _dead_letter_settled(self, message: Message, confirmed: bool) -> None:
        with self._lock:
            if confirmed:
                self.core.dead_letter_confirmed(message.partition, message.offset)
            else:
                self.core.dead_letter_failed(message.partition, message.offset, time.monotonic())

    async def stop(self) -> None:
        self.release_waiters()
        # Before the thread's final commit: what the dead-letter topic confirms by then is committed with it.
        await self._settle_dead_letters()
        self._stopping.set()
        await asyncio.to_thread(self._thread.join, 30.0)

    # -- consumer thread -------------------------------------------------------
    def _consumer_config(self) -> dict[str, Any]:
        return self.cluster.consumer_config(self.group, self.client_id)

    def _run(self) -> None:
        try:
            consumer = Consumer(self._consumer_config())
            consumer.subscribe(
                [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
        except KafkaException as exc:
            self.fail(f"cannot start consumer for group {self.group}: {exc}")
            self._signal_from_thread()
            return
        flow = FlowControl()
        next_commit = time.monotonic() + self.settings.offsets_commit_interval
        try:
            while not self._stopping.is_set():
                if flow.held_since is not None:
                    self._stopping.wait(_HOLD_POLL_SECONDS)
                else:
                    # While partitions are paused the next message may never come: wait briefly, so that
                    # the resume follows the callers draining the buffer instead of a 100 ms poll.
                    self._poll_once(consumer, _PAUSED_POLL_SECONDS if flow.paused else _POLL_SECONDS)
                self._apply_backpressure(consumer, flow)
                self._collect_dead_letters()
                if time.monotonic() >= next_commit:
                    self._commit(consumer)
                    next_commit = time.monotonic() + self.settings.offsets_commit_interval
        finally:
            self._commit(consumer)
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("closing consumer of group %s: %s", self.group, exc)

    def _poll_once(self, consumer: Consumer, wait: float) -> None:
        try:
            # consume(n, timeout) waits for n messages or the whole timeout: take what is there, else block
            # for the first message only, so a lone new message is handed out at once, not 100 ms later.
            records = consumer.consume(num_messages=_FETCH_BATCH, timeout=0)
            if not records:
                records = consumer.consume(num_messages=1, timeout=wait)
                if records:
                    records += consumer.consume(num_messages=_FETCH_BATCH - 1, timeout=0)
        except KafkaException as exc:
            log.warning("group %s topic %s: consume failed: %s", self.group, self.topic, exc)
            time.sleep(_POLL_SECONDS)
            return
        if not records:
            return
        errors = list(map(_error, records))
        # By identity: KafkaError's == against None raises (list.count then fails with a SystemError, which
        # ended this thread at the first error event, an UNKNOWN_TOPIC_OR_PART for instance).
        if any(map(operator.is_not, errors, itertools.repeat(None))):
            for record, error in zip(records, errors, strict=True):
                if error is None or self._unreadable.note(record):
                    continue
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("group %s topic %s: %s", self.group, self.topic, error.str())
            records = [record for record, error in zip(records, errors, strict=True) if error is None]
            if not records:
                return
        batches = batches_of(records)
        if self._unreadable:
            self._unreadable.clear(batch.partition for batch in batches)
        sample = batches[-1]
        size = len(sample.values[-1] or b"") + len(sample.keys[-1] or b"") + 64
        self._message_bytes += (size - self._message_bytes) * 0.2
        with self._lock:
            self.core.add_batches(batches)
        self._signal_from_thread()

    def _collect_dead_letters(self) -> None:
        now = time.monotonic()
        with self._lock:
            letters = self.core.take_dead_letters(now)
            retries = self.core.take_dead_letter_retries(now)
        if letters or retries:
            try:
                self._loop.call_soon_threadsafe(self._park_dead_letters, letters, retries)
            except RuntimeError:
                if self._dead_letter_sink is not None:
                    # Held un-acked, so left out of every commit: a restarted gateway gives them up again.
                    log.warning(
                        "group %s topic %s: %d dead letters not produced at shutdown, left uncommitted",
                        self.group,
                        self.topic,
                        len(letters) + len(retries),
                    )
                else:
                    log.error(
                        "group %s topic %s: %d dead letters lost at shutdown",
                        self.group,
                        self.topic,
                        len(letters),
                    )

    def _apply_backpressure(self, consumer: Consumer, flow: FlowControl) -> None:
        with self._lock:
            buffered = self.core.buffered_counts()
        paused = flow.paused
        paused &= set(buffered)
        high = buffer_high_water(len(buffered), self._message_bytes)
        active = {p: count for p, count in buffered.items() if p not in paused}
        to_pause: list[int] = []
        if flow.due_for_pause(active, high, time.monotonic()):
            to_pause = [p for p, count in active.items() if count >= high]
        to_resume = [p for p in paused if buffered.get(p, 0) < high // 2 + 1]
        try:
            if to_pause:
                consumer.pause([TopicPartition(self.topic, p) for p in to_pause])
                paused.update(to_pause)
                self._pauses_metric.inc(len(to_pause))
            if to_resume:
                partitions = [TopicPartition(self.topic, p) for p in to_resume]
                consumer.resume(partitions)
                paused.difference_update(to_resume)
                # librdkafka's fetcher notices a resumed partition only on its next idle wakeup, about a
                # second later when every partition was paused (measured: ~950 ms, the stall that capped
                # batch consumption near 10k msg/s). A seek to the position it would resume from anyway
                # restarts the fetch at once (~10 ms). Partitions without a position yet are left alone.
                for position in consumer.position(partitions):
                    if position.offset >= 0:
                        consumer.seek(position)
        except KafkaException as exc:
            log.warning("pause/resume of %s failed: %s", self.topic, exc)

    def _commit(self, consumer: Consumer) -> None:
        with self._lock:
            commits = self.core.take_commits()
        if not commits:
            return
        offsets = [
            TopicPartition(self.topic, partition, point.offset, metadata=point.metadata)
            for partition, point in commits.items()
        ]
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("group %s topic %s: commit failed, will retry: %s", self.group, self.topic, exc)
            with self._lock:
                self.core.forget_last_commits(commits)

    def _start_offsets(
        self, consumer: Consumer, partitions: Sequence[TopicPartition]
    ) -> list[tuple[int, int, str]]:
        committed = consumer.committed(list(partitions), timeout=_KAFKA_TIMEOUT_SECONDS)
        starts = []
        for tp in committed:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(self.topic, tp.partition), timeout=_KAFKA_TIMEOUT_SECONDS
            )
            if tp.offset >= 0:
                # Clamped, as librdkafka would reset it, so the tracker's baseline
                # is an offset that will actually be fetched.
                start, metadata = min(max(tp.offset, low), high), (tp.metadata or "")
                if start != tp.offset:
                    metadata = ""
            else:
                start, metadata = (low if self.settings.initial_offset == "oldest" else high), ""
            starts.append((tp.partition, start, metadata))
        return starts

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.member_id = consumer.memberid() or ""
        starts: list[tuple[int, int, str]] = []
        for attempt in range(3):
            try:
                starts = self._start_offsets(consumer, partitions)
                break
            except KafkaException as exc:
                log.warning(
                    "group %s: reading committed offsets failed (try %d): %s", self.group, attempt + 1, exc
                )
                time.sleep(0.2)
        else:
            self.fail(f"group {self.group} topic {self.topic}: cannot read committed offsets")
        with self._lock:
            for partition, start, metadata in starts:
                self.core.assign(partition, start, metadata)
        positions = [TopicPartition(self.topic, partition, start) for partition, start, _ in starts]
        if self._cooperative:
            consumer.incremental_assign(positions)
        else:
            consumer.assign(positions)
        log.info("group %s topic %s: assigned %s", self.group, self.topic, [p for p, _, _ in starts])
        self._signal_from_thread()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._unreadable.clear(tp.partition for tp in partitions)
        commits = []
        with self._lock:
            for tp in partitions:
                point = self.core.revoke(tp.partition)
                if point is not None:
                    commits.append(
                        TopicPartition(self.topic, tp.partition, point.offset, metadata=point.metadata)
                    )
        if commits:
            try:
                consumer.commit(offsets=commits, asynchronous=False)
            except KafkaException as exc:
                log.warning("group %s: final commit on revoke failed: %s", self.group, exc)
        self._unassign(consumer, partitions)
        self._signal_from_thread()

    def _unassign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The group moved on without us: our offsets may no longer be committed.
        self._unreadable.clear(tp.partition for tp in partitions)
        with self._lock:
            for tp in partitions:
                self.core.revoke(tp.partition)
        self._unassign(consumer, partitions)
        self._signal_from_thread()
