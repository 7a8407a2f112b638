"""The share service: share groups' records (KIP-932) between the log, the pure share-partition states
(sluice.coordinator.share) and `__share_group_state`. The ShareFetch/ShareAcknowledge handlers
(sluice.broker.handlers.share) and the offset admin APIs reach it.

What it keeps durable, and when:
- a share-partition's state is written to `__share_group_state` (one snapshot record per share-partition,
  Kafka's layout) after every change, in one batch per request;
- an acquisition is appended before the records go out, so a crash, kill -9 included, brings the records
  back with their delivery count raised; the fetch answer does not wait for the fsync (the write survives a
  process crash; a power cut may lose the raise, as Kafka, which never persists acquisitions, always does);
- an acknowledgement's answer waits until its record is fsynced (the group commit), so nothing a member was
  told is accepted can be delivered again after any crash.

Time: every lock has a deadline; `tick` gives the expired ones back (available again, or archived at the
group's delivery limit). Members' share sessions (sluice.coordinator.share.sessions) close with their
connection, giving back what their members held.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from sluice.broker.broker import Broker, PartitionState
from sluice.broker.group_configs import duration_ms
from sluice.coordinator.share.partition import (
    AcknowledgeType,
    Acquired,
    AcquireMode,
    Ask,
    BatchKind,
    LogBatch,
    SharePartition,
)
from sluice.coordinator.share.records import SharePartitionKey
from sluice.coordinator.share.sessions import ShareSession, ShareSessions
from sluice.coordinator.share.states import ShareStates
from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.records import LOG_OVERHEAD, iter_batches
from sluice.state_topic.api import KeyValue
from sluice.state_topic.local import StateTopicService
from sluice.storage.log import DiskFull

log = logging.getLogger("sluice.share")

SHARE_STATE_TOPIC = "__share_group_state"
RESET_EARLIEST, RESET_LATEST, RESET_BY_DURATION = "earliest", "latest", "by_duration:"


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """What one share group runs with: its share.* group configs, else the broker's group.share.*."""

    lock_duration_ms: int
    delivery_limit: int
    max_record_locks: int
    renew_enabled: bool
    read_committed: bool
    auto_offset_reset: str


class ShareService(StateTopicService[ShareStates]):
    def __init__(self, broker: Broker) -> None:
        super().__init__(
            broker,
            SHARE_STATE_TOPIC,
            broker.config.share_coordinator_state_topic_segment_bytes,
            lambda: ShareStates(
                lambda group_id: broker.group_configs.effective(group_id, "share.delivery.count.limit", broker.config)
            ),
        )
        self.broker = broker
        self.sessions = ShareSessions(broker.config.group_share_max_share_sessions)
        self.counters = broker.metrics.share
        # (lock deadline, share-partition): every share-partition with a lock has its earliest one here;
        # entries that no longer hold are dropped when they come up.
        self._deadlines: list[tuple[int, SharePartitionKey]] = []
        # Share-partitions changed since their state was last written.
        self._dirty: set[SharePartitionKey] = set()

    @property
    def states(self) -> ShareStates:
        return self.coordinator

    def settings(self, group_id: str) -> ShareSettings:
        configs, config = self.broker.group_configs, self.broker.config
        return ShareSettings(
            lock_duration_ms=configs.effective(group_id, "share.record.lock.duration.ms", config),
            delivery_limit=configs.effective(group_id, "share.delivery.count.limit", config),
            max_record_locks=configs.effective(group_id, "share.partition.max.record.locks", config),
            renew_enabled=configs.text(group_id, "share.renew.acknowledge.enable") == "true",
            read_committed=configs.text(group_id, "share.isolation.level") == "read_committed",
            auto_offset_reset=configs.text(group_id, "share.auto.offset.reset"),
        )

    # ----- acquiring -----

    def acquire(
        self,
        member_id: str,
        key: SharePartitionKey,
        state: PartitionState,
        *,
        max_records: int,
        max_bytes: int,
        must_fit: bool,
        mode: AcquireMode,
        batch_size: int,
        now_ms: int,
    ) -> tuple[bytes, Acquired]:
        """Read the partition from where the group needs records and hand `member_id` what it may have:
        the log bytes that hold them (whole batches) and the ranges acquired. The first batch comes even
        when larger than `max_bytes` (KIP-74), unless `must_fit` (another partition already answered).
        Raises KafkaError."""
        settings = self.settings(key.group_id)
        partition = self.share_partition(key, state, now_ms)
        self._expire(key, partition, now_ms, settings.delivery_limit)
        if not partition.can_acquire(settings.max_record_locks):
            return b"", Acquired()
        offset = partition.next_fetch_offset()
        data = self.broker.read(state, offset, max(max_bytes, 1), committed=settings.read_committed)
        if must_fit and len(data) > max_bytes:
            data = within(data, max_bytes)
        if not data:
            return b"", Acquired()
        ask = Ask(
            max_records, now_ms + settings.lock_duration_ms, settings.max_record_locks, settings.delivery_limit,
            mode, batch_size,
        )
        got = partition.acquire(member_id, log_batches(self.broker, state, offset, data, settings.read_committed), ask)
        if got.count or got.archived:
            self._dirty.add(key)
            self._watch(key, partition)
            self.counters.acquired += got.count
            self.counters.redelivered += got.redelivered
        return (covering(data, got.ranges) if got.count else b""), got

    def share_partition(self, key: SharePartitionKey, state: PartitionState, now_ms: int) -> SharePartition:
        """The group's state of the partition, started where share.auto.offset.reset says the first time the
        group reads it (Kafka initializes at the first fetch too), and moved past records the log dropped."""
        partition = self.states.get(key)
        log_start = state.log.log_start_offset
        if partition is None:
            partition = self.states.start(key, self._reset_offset(key.group_id, state, now_ms))
            self._dirty.add(key)
        elif partition.start_offset < log_start:
            partition.move_start(log_start)
            self._dirty.add(key)
        return partition

    def _reset_offset(self, group_id: str, state: PartitionState, now_ms: int) -> int:
        reset = self.settings(group_id).auto_offset_reset
        if reset == RESET_EARLIEST:
            return state.log.log_start_offset
        if reset.startswith(RESET_BY_DURATION):
            found = state.log.offset_for_timestamp(now_ms - duration_ms(reset[len(RESET_BY_DURATION):]))
            if found is None or found[0] >= state.high_watermark:
                return state.high_watermark
            return found[0]
        return state.high_watermark

    # ----- acknowledging -----

    def acknowledge(
        self,
        member_id: str,
        key: SharePartitionKey,
        batches: list[tuple[int, int, list[int]]],
        *,
        renew_allowed: bool,
        now_ms: int,
    ) -> tuple[ErrorCode, str | None]:
        """Apply one partition's acknowledgements, all or none."""
        partition = self.states.get(key)
        if partition is None:
            return ErrorCode.INVALID_RECORD_STATE, "Batch record not found. The share-partition has no records."
        settings = self.settings(key.group_id)
        # Locks that ran out before the timer fired are out already: their records are no longer held.
        self._expire(key, partition, now_ms, settings.delivery_limit)
        renewing = any(AcknowledgeType.RENEW in types for _, _, types in batches)
        if renewing and renew_allowed and not settings.renew_enabled:
            return ErrorCode.INVALID_RECORD_STATE, "Renewing acquisition locks is not enabled for the group."
        result = partition.acknowledge(
            member_id,
            batches,
            delivery_limit=settings.delivery_limit,
            lock_deadline_ms=now_ms + settings.lock_duration_ms,
            renew_allowed=renew_allowed,
        )
        if result.error is not ErrorCode.NONE:
            return result.error, result.message
        for kind, count in result.by_type.items():
            self.counters.acknowledged[kind.name.lower()] += count
        self.counters.archived_at_limit += result.archived_at_limit
        if set(result.by_type) - {AcknowledgeType.RENEW}:
            self._dirty.add(key)
        self._watch(key, partition)
        if AcknowledgeType.RELEASE in result.by_type:
            self._wake(key)
        return ErrorCode.NONE, None

    # ----- sessions and departures -----

    def release_session(self, session: ShareSession) -> None:
        """What the session's member holds in the session's partitions goes back (its session closed)."""
        for topic_id, index in session.partitions:
            key = SharePartitionKey(session.group_id, topic_id, index)
            partition = self.states.get(key)
            if partition is None:
                continue
            released = partition.release_member(session.member_id, self.settings(session.group_id).delivery_limit)
            if released:
                self.counters.archived_at_limit += released.archived
                self._dirty.add(key)
                self._wake(key)

    def connection_closed(self, connection: Hashable, now_ms: int) -> None:
        """The sessions of a closed connection end, and their members' records go back."""
        for session in self.sessions.closed_connection(connection):
            self.release_session(session)
        self.write(now_ms)

    # ----- persistence -----

    def write(self, now_ms: int) -> bool:
        """Append the state of every share-partition changed since the last write, as one batch. False when
        it could not be written: the service then unloads (its state may be ahead of the log)."""
        if not self._dirty:
            return True
        records = [self.states.record(key) for key in sorted(self._dirty, key=_order)]
        self._dirty.clear()
        return self._append(records, now_ms)

    def _append(self, records: list[KeyValue], now_ms: int) -> bool:
        """Append state records; on a failure the service unloads (False), its state then comes from the log."""
        try:
            self.persist(records, now_ms)
        except (KafkaError, DiskFull, OSError) as exc:
            self.unload(str(exc))
            return False
        return True

    def reset(self, key: SharePartitionKey, offset: int) -> None:
        """AlterShareGroupOffsets: the share-partition starts again at `offset`, nothing in flight."""
        partition = self.states.get(key)
        if partition is None:
            self.states.start(key, offset)
        else:
            partition.reset(offset)
        self._dirty.add(key)

    def forget(self, keys: Iterable[SharePartitionKey], now_ms: int) -> bool:
        """Drop share-partitions for good (their group or topic was deleted, or their offsets). False when
        the tombstones could not be written (the service unloads, and the state comes back from the log)."""
        records = []
        for key in keys:
            self.states.forget(key)
            self._dirty.discard(key)
            records += ShareStates.tombstones(key)
        return not records or self._append(records, now_ms)

    def drop_group(self, group_id: str, now_ms: int) -> bool:
        return self.forget([key for key, _ in self.states.of_group(group_id)], now_ms)

    def drop_topic(self, topic_id: uuid.UUID, now_ms: int) -> bool:
        return self.forget([key for key in list(self.states.partitions) if key.topic_id == topic_id], now_ms)

    def on_unloaded(self) -> None:
        self._dirty.clear()
        self._deadlines.clear()

    def on_loaded(self, now_ms: int) -> None:
        # Locks do not outlive a load: what was held comes back available, counted (ShareStates.apply).
        self._deadlines.clear()
        log.info("the state of %d share-partitions is loaded", len(self.states.partitions))

    # ----- locks and time -----

    def _watch(self, key: SharePartitionKey, partition: SharePartition) -> None:
        deadline = partition.next_deadline()
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, key))

    def next_deadline(self) -> int | None:
        while self._deadlines:
            deadline, key = self._deadlines[0]
            partition = self.states.get(key)
            current = None if partition is None else partition.next_deadline()
            if current == deadline:
                return deadline
            heapq.heappop(self._deadlines)
            if current is not None and current > deadline:
                heapq.heappush(self._deadlines, (current, key))
        return None

    def tick(self, now_ms: int) -> None:
        """Locks that ended give their records back."""
        if not self.ensure_loaded(now_ms):
            return
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, key = heapq.heappop(self._deadlines)
            partition = self.states.get(key)
            if partition is None:
                continue
            self._expire(key, partition, now_ms, self.settings(key.group_id).delivery_limit)
            self._watch(key, partition)
        self.write(now_ms)

    def _expire(self, key: SharePartitionKey, partition: SharePartition, now_ms: int, delivery_limit: int) -> None:
        released = partition.expire(now_ms, delivery_limit)
        if released:
            self.counters.lock_timeouts += released.available + released.archived
            self.counters.archived_at_limit += released.archived
            self._dirty.add(key)
            self._wake(key)

    def _wake(self, key: SharePartitionKey) -> None:
        """Records became available without new data: wake the fetches waiting on the partition."""
        meta = self.broker.storage.topic_by_id(key.topic_id)
        if meta is not None:
            self.broker.on_data((meta.name, key.partition))


def _order(key: SharePartitionKey) -> tuple[str, str, int]:
    return (key.group_id, str(key.topic_id), key.partition)


def log_batches(broker: Broker, state: PartitionState, offset: int, data: bytes, committed: bool) -> list[LogBatch]:
    """The batches of `data` (read at `offset`) as the share-partition sees them: control batches are never
    delivered, nor, under read_committed, batches of transactions that were aborted."""
    aborted = broker.aborted_transactions(state, offset, data) if committed else []
    batches = []
    for _, header in iter_batches(data):
        if header.is_control:
            kind = BatchKind.CONTROL
        elif aborted and header.is_transactional and any(
            txn.producer_id == header.producer_id and txn.first_offset <= header.base_offset <= txn.last_offset
            for txn in aborted
        ):
            kind = BatchKind.ABORTED
        else:
            kind = BatchKind.DATA
        batches.append(LogBatch(header.base_offset, header.last_offset, kind))
    return batches


def within(data: bytes, max_bytes: int) -> bytes:
    """The whole batches at the start of `data` that fit in `max_bytes` (maybe none)."""
    end = 0
    for pos, header in iter_batches(data):
        size = LOG_OVERHEAD + header.batch_length
        if pos + size > max_bytes:
            break
        end = pos + size
    return data[:end]


def covering(data: bytes, ranges: list[tuple[int, int, int]]) -> bytes:
    """The whole batches of `data` that hold any of `ranges`' offsets (the client keeps what it acquired)."""
    first, last = ranges[0][0], ranges[-1][1]
    start = end = None
    for pos, header in iter_batches(data):
        if header.last_offset < first:
            continue
        if header.base_offset > last:
            break
        if start is None:
            start = pos
        end = pos + LOG_OVERHEAD + header.batch_length
    return data[start:end] if start is not None else b""


def attach_share_service(broker: Broker, now_ms: int) -> ShareService:
    service = ShareService(broker)
    broker.shares = service
    broker.services.append(service)
    service.load(now_ms)
    return service
