"""The broker: the single writer of state, and the log operations on it; no sockets, no clocks.

Requests reach it through the pipeline in sluice.broker.dispatch (which also holds the authorizer and the
quotas) and the handlers in sluice.broker.handlers.

Durability is modelled explicitly: every partition has a log end (what was appended) and a high watermark
(what consumers may see). With fsync_before_ack the high watermark only moves after a flush covered the
data, so no consumer ever reads a record that a crash could still take back, and an offset can never be
seen holding two different values.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from sluice.broker.config import BrokerConfig
from sluice.broker.dynamic_configs import DynamicBrokerConfigs
from sluice.broker.group_configs import GroupConfigs
from sluice.broker.metrics import BrokerMetrics
from sluice.broker.partition_state import (
    PartitionState,
    load_partition_state,
    rebuild_producer_state,
    segment_base_of,
)
from sluice.broker.partition_table import PartitionTable
from sluice.broker.record_checks import (
    NO_CHECKS,
    RecordChecks,
    check_keys_for_compaction,
    check_records,
    merge_record_errors,
    parse_checks,
)
from sluice.errors import ErrorCode, KafkaError, RecordErrors
from sluice.protocol.control_batches import encode_end_txn_batch
from sluice.protocol.records import BatchHeader, iter_batches, parse_batch_header, validate_batches
from sluice.security.acl import AclStore
from sluice.security.authn import CredentialStore, FailedLoginThrottle
from sluice.storage.api import Storage, TopicMeta
from sluice.storage.damage import DamagedOffsets
from sluice.storage.log import DiskFull
from sluice.storage.metadata import topic_name_problem
from sluice.storage.producer_state import ProducerStateManager
from sluice.storage.space import FreeSpaceGuard
from sluice.storage.txn_index import AbortedTxn

_log = logging.getLogger("sluice.broker")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
# While writes are refused (a full disk), coordinator timers look again this often.
TICK_RETRY_WHILE_REFUSING_MS = 500
# Checks a transactional batch against the transaction coordinator: (producer id, epoch, topic, partition);
# raises KafkaError (PRODUCER_FENCED, INVALID_TXN_STATE...) when the partition is not in its transaction.
TxnVerifier = Callable[[int, int, str, int], None]
# An answer to a parked request: its reply token, the response, and the partition whose appends so far must be
# durable before it goes out (None: at once).
ReadyReply = tuple[Hashable, Any, tuple[str, int] | None]


class ProduceRules(NamedTuple):
    """What a produce to one topic is checked against, read from its configs."""

    max_batch_bytes: int  # max.message.bytes
    compacted: bool  # cleanup.policy has "compact": every record needs a key
    checks: RecordChecks  # message.timestamp.* bounds and the like (record_checks.py)
    internal: bool = False  # a state topic: only the broker writes it (append_internal)


def check_topic_name(name: str | None) -> str:
    problem = topic_name_problem(name or "")
    if problem:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    return name or ""


@dataclass(slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    # KIP-467: (record index, message) of each invalid record when error is INVALID_RECORD and friends.
    record_errors: Sequence[tuple[int, str]] = ()


class Broker:
    def __init__(self, config: BrokerConfig, storage: Storage) -> None:
        self.config = config
        self.storage = storage
        # Loaded on first use (partition_table.py), so start-up reads no partition.
        self.partitions: PartitionTable[PartitionState] = PartitionTable(self._load_partition)
        # Called with each partition once loaded (the transaction service aborts hanging transactions).
        self.on_partition_loaded: Callable[[PartitionState], None] = lambda state: None
        # Partitions appended to since the last flush started: the next group commit covers them.
        self.unflushed: dict[tuple[str, int], PartitionState] = {}
        # Appends that must reach the disk with the next group commit, but that no answer waits for: they
        # ride along with the next flush (or the server's short timer) instead of paying one of their own.
        self.deferred: dict[tuple[str, int], PartitionState] = {}
        self.ready_replies: list[ReadyReply] = []
        # The shell registers this to wake long polls waiting on a partition.
        self.on_data: Callable[[tuple[str, int]], None] = lambda key: None
        self._next_producer_id = 0
        # Per topic: the TopicMeta the produce rules were read from, and the rules.
        self._produce_rules: dict[str, tuple[TopicMeta, ProduceRules]] = {}
        self.groups: Any = None  # the group coordinator adapter, attached by sluice.broker.group_service
        # The LogCleanerManager (sluice.storage.compaction.manager), started by the server shell.
        self.cleaner: Any = None
        data_dir = storage.data_dir
        # Produce is refused while the data dir's free space is below min_free_bytes (or after ENOSPC).
        self.free_space = FreeSpaceGuard(data_dir, config.min_free_bytes) if data_dir is not None else None
        self._ticks_deferred_until: int | None = None
        self.transactions: Any = None  # the transaction coordinator adapter (sluice.broker.transaction_service)
        self.shares: Any = None  # share groups' records (sluice.broker.share_service)
        self.txn_verifier: TxnVerifier | None = None
        # The services with timers (`next_deadline`, `tick`: the group, transaction and share services), in
        # the order they tick; each appends itself when attached.
        self.services: list[Any] = []
        # Security: SCRAM credentials and ACLs live beside the logs (in memory without a data dir).
        security_dir = config.data_dir / "security" if config.data_dir is not None else None
        self.credentials = CredentialStore(security_dir / "credentials.json" if security_dir else None)
        self.acls = AclStore(security_dir / "acls.json" if security_dir else None)
        self.login_throttle = FailedLoginThrottle(config.connection_failed_authentication_delay_ms)
        # Configs AlterConfigs set on the BROKER resource (KIP-226), laid over `config` from the start.
        self.dynamic_configs = DynamicBrokerConfigs.start(config)
        self.group_configs = GroupConfigs.open(config.data_dir)
        self.metrics = BrokerMetrics()
        for meta in storage.topics():
            self._open_partitions(meta)

    # ----- timers and parked replies -----

    def next_deadline(self) -> int | None:
        """When `tick` must next run (session expiry, rebalance deadlines), or None."""
        deadlines = [d for service in self.services if (d := service.next_deadline()) is not None]
        deadline = min(deadlines, default=None)
        if deadline is not None and self._ticks_deferred_until is not None:
            return max(deadline, self._ticks_deferred_until)
        return deadline

    def tick(self, now_ms: int) -> None:
        if self.write_refusal(now_ms) is not None:
            # Timers write (expired members, aborts of timed-out transactions): with no room to persist
            # them, wait for space rather than change coordinator state the log cannot follow.
            self._ticks_deferred_until = now_ms + TICK_RETRY_WHILE_REFUSING_MS
            return
        self._ticks_deferred_until = None
        for service in self.services:
            service.tick(now_ms)

    def take_ready_replies(self) -> list[ReadyReply]:
        """Answers to parked requests that became ready: (reply token, response, partition to be durable)."""
        ready, self.ready_replies = self.ready_replies, []
        return ready

    # ----- topics -----

    def _open_partitions(self, meta: TopicMeta) -> None:
        for index in range(meta.partitions):
            self.partitions.add((meta.name, index))

    def _load_partition(self, key: tuple[str, int]) -> PartitionState:
        """A partition's state from its log (which storage opens, and recovers after a crash, first)."""
        topic, index = key
        state = load_partition_state(topic, index, self.storage.log(topic, index))
        self.partitions[key] = state
        self.on_partition_loaded(state)
        return state

    def find_open_transaction(self, topic: str, index: int, producer_id: int) -> None:
        """The transaction coordinator says `producer_id` has an open transaction here but the bounded start
        scan did not see its first batch: replay this partition from its start for the LSO to be right."""
        state = self.partitions.get((topic, index))
        if state is None or producer_id in state.producers.ongoing:
            return
        state.producers = ProducerStateManager()
        rebuild_producer_state(state, state.log.log_start_offset)

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str], *, internal: bool = False
    ) -> TopicMeta:
        check_topic_name(name)
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"partitions must be at least 1, got {partitions}")
        merged = {**self.config.topic_defaults, **configs}
        self._refuse_new_partitions_on_a_full_disk()
        meta = self.storage.create_topic(name, partitions, merged, internal=internal)
        self._open_partitions(meta)
        return meta

    def delete_topic(self, name: str) -> None:
        meta = self.storage.topic(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        try:
            self.storage.delete_topic(name)
        except KafkaError:
            # Not deleted (no room for the metadata file). If storage dropped the data to make room, its
            # partitions were reopened empty: follow them.
            for index in range(meta.partitions):
                state = self.partitions.peek((name, index))
                if state is not None and state.log is not self.storage.log(name, index):
                    del self.partitions[(name, index)]
                    self.unflushed.pop((name, index), None)
                    self.deferred.pop((name, index), None)
            self._open_partitions(meta)
            raise
        for index in range(meta.partitions):
            self.partitions.pop((name, index), None)
            self.unflushed.pop((name, index), None)
            self.deferred.pop((name, index), None)

    def _refuse_new_partitions_on_a_full_disk(self) -> None:
        if self.free_space is not None and self.free_space.still_full():
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"data dir {self.free_space.directory}: disk full (ENOSPC); no new partitions until space is freed",
            )

    def create_partitions(self, name: str, total: int) -> TopicMeta:
        self._refuse_new_partitions_on_a_full_disk()
        meta = self.storage.create_partitions(name, total)
        self._open_partitions(meta)
        return meta

    def topic_for_metadata(self, name: str, allow_auto_create: bool) -> TopicMeta | None:
        meta = self.storage.topic(name)
        if (
            meta is None
            and allow_auto_create
            and self.config.auto_create_topics
            and not topic_name_problem(name)
        ):
            meta = self.create_topic(name, self.config.default_partitions, {})
        return meta

    def partition(self, topic: str, index: int) -> PartitionState:
        state = self.partitions.get((topic, index))
        if state is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{index} does not exist")
        return state

    # ----- produce -----

    def append(self, topic: str, index: int, records: memoryview | bytes | None, now_ms: int) -> AppendResult:
        """Validate and append one partition's record batches (all of them or none)."""
        try:  # once per produced partition: the checks below are inlined where a call would cost more
            state = self.partitions.get((topic, index)) or self.partition(topic, index)
            if not records:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request carries no record batch")
            if state.log.offline_reason:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, state.log.offline_reason)
            if self.free_space is not None and (refusal := self.free_space.refusal(now_ms, len(records))):
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, refusal)
            rules = self._rules_for(topic)
            if rules.internal:  # Kafka's ReplicaManager: clients never write the coordinators' own logs
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}")
            headers = validate_batches(records, max_batch_bytes=rules.max_batch_bytes)
            # KIP-467: every bad record of the batch is named, whichever check it failed.
            failed: list[RecordErrors] = []
            if rules.compacted:
                try:
                    check_keys_for_compaction(records, headers)
                except RecordErrors as exc:
                    failed.append(exc)
            if rules.checks is not NO_CHECKS or len(headers) > 1 or headers[0].is_log_append_time:
                try:  # (without bounds, only a batch claiming LogAppendTime can fail these)
                    check_records(memoryview(records), headers, rules.checks, now_ms)
                except RecordErrors as exc:
                    failed.append(exc)
            if failed:
                raise merge_record_errors(failed)
            return self._append_validated(state, records, headers, now_ms)
        except RecordErrors as exc:
            return AppendResult(exc.code, message=exc.message, record_errors=exc.record_errors)
        except KafkaError as exc:
            return AppendResult(exc.code, message=exc.message)

    def write_refusal(self, now_ms: int, size: int = 0) -> str | None:
        """Why writes are refused now (free space below min_free_bytes, or the disk was found full)."""
        return self.free_space.refusal(now_ms, size) if self.free_space is not None else None

    def _rules_for(self, topic: str) -> ProduceRules:
        # Parsing configs costs more than validating a batch: rules are kept per TopicMeta (new on each change).
        meta = self.storage.topic(topic)
        cached = self._produce_rules.get(topic)
        if cached is not None and cached[0] is meta:
            return cached[1]
        if meta is None:
            return ProduceRules(self.config.max_message_bytes, False, NO_CHECKS)
        rules = ProduceRules(
            meta.config.max_message_bytes, meta.config.compacts, parse_checks(meta.configs), meta.internal
        )
        self._produce_rules[topic] = (meta, rules)
        return rules

    def append_internal(self, topic: str, index: int, batch: bytes, now_ms: int) -> int:
        """Append a batch the broker wrote itself (a state topic's records: sluice.state_topic.local):
        none of produce's per-topic checks, the same producer state, high watermark and group commit.
        Returns its base offset; raises KafkaError, or DiskFull when the disk is full."""
        state = self.partition(topic, index)
        return self._append_validated(state, batch, [parse_batch_header(batch)], now_ms).base_offset

    def _append_validated(
        self, state: PartitionState, records: memoryview | bytes, headers: list[BatchHeader], now_ms: int
    ) -> AppendResult:
        producers = state.producers
        for header in headers:
            if header.producer_id >= 0:
                if header.is_transactional:
                    if self.txn_verifier is None:
                        raise KafkaError(
                            ErrorCode.INVALID_TXN_STATE, "this broker has no transaction coordinator"
                        )
                    self.txn_verifier(header.producer_id, header.producer_epoch, state.topic, state.index)
                duplicate = producers.check(header)
                if duplicate is not None:
                    # A retry of a batch already stored: answer with the offset it got the first time.
                    if len(headers) == 1:
                        return AppendResult(ErrorCode.NONE, duplicate, state.log.log_start_offset)
                    raise KafkaError(ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "batch already appended")
            elif header.is_transactional:
                raise KafkaError(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")
        view = memoryview(records)
        first_offset = -1
        pos = 0
        messages = 0
        for header in headers:
            size = header.size
            try:
                base = state.log.append(view[pos : pos + size], header, append_time_ms=now_ms)
            except DiskFull:
                if self.free_space is not None:
                    self.free_space.disk_full(now_ms)
                raise
            if first_offset < 0:
                first_offset = base
            if header.producer_id >= 0:
                producers.remember(header, base)
            pos += size
            messages += header.last_offset_delta + 1
        self.metrics.produced(state.topic, pos, messages)
        self._appended(state)
        return AppendResult(ErrorCode.NONE, first_offset, state.log.log_start_offset)

    def write_marker(
        self,
        state: PartitionState,
        producer_id: int,
        epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> int:
        """Append a COMMIT/ABORT control batch ending `producer_id`'s transaction here; returns its offset."""
        lso = state.last_stable_offset
        batch = encode_end_txn_batch(
            commit=commit,
            producer_id=producer_id,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=now_ms,
        )
        offset = state.log.append(batch, parse_batch_header(batch), append_time_ms=now_ms)
        done = state.producers.complete(producer_id, epoch, offset, aborted=not commit)
        if done is not None and not commit:
            state.txn_index.append(
                AbortedTxn(producer_id, done.first_offset, offset, lso), segment_base_of(state.log, offset)
            )
        self._appended(state)
        return offset

    def _appended(self, state: PartitionState) -> None:
        if self.config.fsync_before_ack:
            self.unflushed[(state.topic, state.index)] = state
        else:
            self.advance_high_watermark(state, state.log.log_end_offset)

    def advance_high_watermark(self, state: PartitionState, offset: int) -> None:
        if offset > state.high_watermark:
            state.high_watermark = offset
            state.producers.on_high_watermark(offset)
            self.on_data((state.topic, state.index))

    # ----- group commit -----

    def defer_flush(self, topic: str, index: int) -> None:
        """What `topic`-`index` holds needs no flush of its own: the next flush that takes the partition
        covers it (a flush makes the whole log durable), else the server's timer (undefer_flushes).

        The caller must have made every append there since the last flush itself, so no answer that
        waits for a flush counts on this partition."""
        state = self.unflushed.pop((topic, index), None)
        if state is not None:
            self.deferred[(topic, index)] = state

    def undefer_flushes(self) -> None:
        self.unflushed.update(self.deferred)
        self.deferred = {}

    def begin_flush(self) -> list[tuple[PartitionState, int]]:
        """Take the partitions that need an fsync, with the log end each flush will make durable."""
        pending = [(state, state.log.log_end_offset) for state in self.unflushed.values()]
        if self.deferred:
            for key in self.unflushed:
                self.deferred.pop(key, None)
        self.unflushed = {}
        if len(pending) > 1:
            # Transaction state first: the fsync thread works in this order, so a record that allows writes
            # elsewhere (a partition added to a transaction) is durable before anything it allowed.
            pending.sort(key=lambda item: item[0].topic != TRANSACTION_STATE_TOPIC)
        return pending

    def end_flush(self, flushed: Iterable[tuple[PartitionState, int]]) -> None:
        for state, offset in flushed:
            self.advance_high_watermark(state, offset)

    # ----- fetch -----

    def read(self, state: PartitionState, offset: int, max_bytes: int, *, committed: bool = False) -> bytes:
        """Whole batches from `offset` below the high watermark (below the LSO when `committed`)."""
        if offset < state.log.log_start_offset or offset > state.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{state.log.log_start_offset}, {state.high_watermark}]",
            )
        if state.log.offline_reason:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, state.log.offline_reason)
        end = state.last_stable_offset if committed else state.high_watermark
        if offset >= end:
            return b""
        try:
            data = state.log.read(offset, max_bytes)
        except DamagedOffsets as damaged:
            # Recovery recorded these offsets as damaged (storage/damage.py): CORRUPT_MESSAGE, as Kafka
            # answers for a corrupt batch, unless the operator chose to let consumers skip them.
            if not self.config.skip_damaged_offsets or damaged.resume_offset >= end:
                raise
            return self.read(state, damaged.resume_offset, max_bytes, committed=committed)
        if end < state.log.log_end_offset:
            data = _cut_at_offset(data, end)
        self.metrics.fetched(state.topic, data, offset)
        return data

    def answers_now(self, state: PartitionState, offset: int, *, committed: bool = False) -> bool:
        """Whether `read` at `offset` answers at once: records, or its out-of-range or offline-log error."""
        high_watermark = state.high_watermark
        if offset < state.log.log_start_offset or offset > high_watermark or state.log.offline_reason:
            return True
        return offset < (state.last_stable_offset if committed else high_watermark)

    def aborted_transactions(self, state: PartitionState, fetch_offset: int, data: bytes) -> list[AbortedTxn]:
        """Aborted transactions a read_committed consumer must filter out of `data` read at `fetch_offset`."""
        if not data or not state.txn_index.entries:
            return []
        last = fetch_offset
        for _, header in iter_batches(data):
            last = header.last_offset
        return state.txn_index.collect(fetch_offset, last + 1)

    # ----- producer ids -----

    def new_producer_id(self, now_ms: int) -> int:
        # Unique across restarts without persisting a counter: the clock's milliseconds, then a sequence.
        candidate = now_ms * 1000
        self._next_producer_id = max(self._next_producer_id + 1, candidate)
        return self._next_producer_id

    def active_producers(self, topic: str, index: int) -> list[ActiveProducer]:
        """DescribeProducers (KIP-664): the idempotent producers this partition remembers."""
        state = self.partition(topic, index)
        producers = state.producers
        return [
            ActiveProducer(
                pid, p.epoch, p.last_sequence, current_txn_start_offset=producers.ongoing.get(pid, -1)
            )
            for pid, p in sorted(producers.producers.items())
        ]

    def log_dir(self) -> tuple[str, int, int]:
        """The one log directory: (absolute path, total bytes, usable bytes); -1 when kept in memory."""
        data_dir = self.storage.data_dir
        if data_dir is None:
            return "memory", -1, -1
        usage = shutil.disk_usage(data_dir)
        return str(Path(data_dir).resolve()), usage.total, usage.free

    def metadata_offset(self) -> int:
        """A stand-in for the KRaft metadata log end: one record per topic and partition recorded."""
        return sum(1 + meta.partitions for meta in self.storage.topics())

    def close(self) -> None:
        self.storage.close(clean=True)


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    producer_id: int
    epoch: int
    last_sequence: int
    # sluice does not keep these per producer yet; -1 is Kafka's "unknown".
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


def _cut_at_offset(data: bytes, end_offset: int) -> bytes:
    """Drop batches at or past `end_offset` (appended but not yet durable)."""
    keep = 0
    for pos, header in iter_batches(data):
        if header.base_offset >= end_offset:
            break
        keep = pos + header.size
    return data[:keep]
