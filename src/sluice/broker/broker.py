"""The broker: the single writer of state. Decoded requests in, outcomes out; no sockets, no clocks.

Durability is modelled explicitly: every partition has a log end (what was appended) and a high watermark
(what consumers may see). With fsync_before_ack the high watermark only moves after a flush covered the
data, so no consumer ever reads a record that a crash could still take back, and an offset can never be
seen holding two different values.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sluice.broker.api import HANDLERS, Outcome, RequestContext
from sluice.broker.config import BrokerConfig
from sluice.broker.metrics import BrokerMetrics
from sluice.errors import ErrorCode, KafkaError, RecordErrors
from sluice.protocol.records import BatchHeader, iter_batches, validate_batches
from sluice.storage.api import PartitionLog, Storage, TopicMeta
from sluice.storage.metadata import topic_name_problem

OFFSETS_TOPIC = "__consumer_offsets"
# Batches per producer remembered for duplicate detection, as Kafka does.
PRODUCER_DEDUP_WINDOW = 5
# How far back the producer state is rebuilt from batch headers at startup.
PRODUCER_STATE_SCAN_OFFSETS = 200_000
MAX_SEQUENCE = 0x7FFFFFFF


def check_topic_name(name: str | None) -> str:
    problem = topic_name_problem(name or "")
    if problem:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    return name or ""


@dataclass(slots=True)
class ProducerBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int


@dataclass(slots=True)
class ProducerState:
    epoch: int
    recent: deque[ProducerBatch] = field(default_factory=lambda: deque(maxlen=PRODUCER_DEDUP_WINDOW))

    @property
    def last_sequence(self) -> int:
        return self.recent[-1].last_sequence if self.recent else -1


@dataclass(slots=True)
class PartitionState:
    topic: str
    index: int
    log: PartitionLog
    high_watermark: int
    producers: dict[int, ProducerState] = field(default_factory=dict)


@dataclass(slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    # KIP-467: (record index, message) of each invalid record when error is INVALID_RECORD and friends.
    record_errors: list[tuple[int, str]] = field(default_factory=list)


class Broker:
    def __init__(self, config: BrokerConfig, storage: Storage) -> None:
        self.config = config
        self.storage = storage
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        # Partitions appended to since the last flush started: the next group commit covers them.
        self.unflushed: dict[tuple[str, int], PartitionState] = {}
        self.ready_replies: list[tuple[Hashable, Any, bool]] = []
        # The shell registers this to wake long polls waiting on a partition.
        self.on_data: Callable[[tuple[str, int]], None] = lambda key: None
        self._next_producer_id = 0
        self._batch_limits: dict[str, tuple[TopicMeta, int]] = {}
        self.groups: Any = None  # the group coordinator adapter, attached by sluice.broker.groups
        self.metrics = BrokerMetrics()
        for meta in storage.topics():
            self._open_partitions(meta)

    # ----- dispatch -----

    def dispatch(self, ctx: RequestContext, request: Any) -> Outcome:
        return HANDLERS.handlers[ctx.api_key].handle(self, ctx, request)

    def next_deadline(self) -> int | None:
        """When `tick` must next run (session expiry, rebalance deadlines), or None."""
        return self.groups.next_deadline() if self.groups is not None else None

    def tick(self, now_ms: int) -> None:
        if self.groups is not None:
            self.groups.tick(now_ms)

    def take_ready_replies(self) -> list[tuple[Hashable, Any, bool]]:
        """Answers to parked requests that became ready: (reply token, response, needs durability)."""
        ready, self.ready_replies = self.ready_replies, []
        return ready

    # ----- topics -----

    def _open_partitions(self, meta: TopicMeta) -> None:
        for index in range(meta.partitions):
            key = (meta.name, index)
            if key not in self.partitions:
                log = self.storage.log(meta.name, index)
                state = PartitionState(meta.name, index, log, log.log_end_offset)
                self._rebuild_producer_state(state)
                self.partitions[key] = state

    def _rebuild_producer_state(self, state: PartitionState) -> None:
        start = max(state.log.log_start_offset, state.log.log_end_offset - PRODUCER_STATE_SCAN_OFFSETS)
        if start >= state.log.log_end_offset:
            return
        for header in state.log.iter_batch_headers(start):
            if header.producer_id >= 0:
                self._remember_batch(state, header, header.base_offset)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str], *, internal: bool = False) -> TopicMeta:
        check_topic_name(name)
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"partitions must be at least 1, got {partitions}")
        merged = {**self.config.topic_defaults, **configs}
        meta = self.storage.create_topic(name, partitions, merged, internal=internal)
        self._open_partitions(meta)
        return meta

    def delete_topic(self, name: str) -> None:
        meta = self.storage.topic(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        for index in range(meta.partitions):
            self.partitions.pop((name, index), None)
            self.unflushed.pop((name, index), None)
        self.storage.delete_topic(name)

    def create_partitions(self, name: str, total: int) -> TopicMeta:
        meta = self.storage.create_partitions(name, total)
        self._open_partitions(meta)
        return meta

    def topic_for_metadata(self, name: str, allow_auto_create: bool) -> TopicMeta | None:
        meta = self.storage.topic(name)
        if meta is None and allow_auto_create and self.config.auto_create_topics and not topic_name_problem(name):
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
        try:
            state = self.partition(topic, index)
            if records is None or len(records) == 0:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request carries no record batch")
            headers = validate_batches(records, max_batch_bytes=self._max_batch_bytes(topic))
            return self._append_validated(state, records, headers, now_ms)
        except RecordErrors as exc:
            return AppendResult(exc.code, message=exc.message, record_errors=exc.record_errors)
        except KafkaError as exc:
            return AppendResult(exc.code, message=exc.message)

    def _max_batch_bytes(self, topic: str) -> int:
        # Parsing topic configs costs more than validating a batch: keep the answer per TopicMeta object,
        # which storage replaces whenever the configs change.
        meta = self.storage.topic(topic)
        if meta is None:
            return self.config.max_message_bytes
        cached = self._batch_limits.get(topic)
        if cached is None or cached[0] is not meta:
            cached = self._batch_limits[topic] = (meta, meta.config.max_message_bytes)
        return cached[1]

    def _append_validated(
        self, state: PartitionState, records: memoryview | bytes, headers: list[BatchHeader], now_ms: int
    ) -> AppendResult:
        for header in headers:
            if header.is_transactional or header.is_control:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "transactional produce is not supported by sluice")
            if header.producer_id >= 0:
                duplicate = self._check_sequence(state, header)
                if duplicate is not None:
                    # A retry of a batch already stored: answer with the offset it got the first time.
                    if len(headers) == 1:
                        return AppendResult(ErrorCode.NONE, duplicate, state.log.log_start_offset)
                    raise KafkaError(ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "batch already appended")
        view = memoryview(records)
        first_offset = -1
        pos = 0
        messages = 0
        for header in headers:
            size = header.size
            base = state.log.append(view[pos : pos + size], header, append_time_ms=now_ms)
            if first_offset < 0:
                first_offset = base
            if header.producer_id >= 0:
                self._remember_batch(state, header, base)
            pos += size
            messages += header.last_offset_delta + 1
        self.metrics.produced(state.topic, pos, messages)
        self._appended(state)
        return AppendResult(ErrorCode.NONE, first_offset, state.log.log_start_offset)

    def _check_sequence(self, state: PartitionState, header: BatchHeader) -> int | None:
        producer = state.producers.get(header.producer_id)
        if producer is None:
            return None
        if header.producer_epoch < producer.epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer epoch {header.producer_epoch} is older than {producer.epoch}",
            )
        if header.producer_epoch > producer.epoch:
            if header.base_sequence != 0:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"a new producer epoch must start at sequence 0, got {header.base_sequence}",
                )
            return None
        for batch in producer.recent:
            if batch.first_sequence == header.base_sequence:
                return batch.base_offset
        expected = (producer.last_sequence + 1) & MAX_SEQUENCE
        if header.base_sequence != expected:
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"expected sequence {expected} from producer {header.producer_id}, got {header.base_sequence}",
            )
        return None

    @staticmethod
    def _remember_batch(state: PartitionState, header: BatchHeader, base_offset: int) -> None:
        producer = state.producers.get(header.producer_id)
        if producer is None or header.producer_epoch != producer.epoch:
            producer = state.producers[header.producer_id] = ProducerState(header.producer_epoch)
        last = (header.base_sequence + header.last_offset_delta) & MAX_SEQUENCE
        producer.recent.append(ProducerBatch(header.base_sequence, last, base_offset))

    def _appended(self, state: PartitionState) -> None:
        if self.config.fsync_before_ack:
            self.unflushed[(state.topic, state.index)] = state
        else:
            self.advance_high_watermark(state, state.log.log_end_offset)

    def advance_high_watermark(self, state: PartitionState, offset: int) -> None:
        if offset > state.high_watermark:
            state.high_watermark = offset
            self.on_data((state.topic, state.index))

    # ----- group commit -----

    def begin_flush(self) -> list[tuple[PartitionState, int]]:
        """Take the partitions that need an fsync, with the log end each flush will make durable."""
        pending = [(state, state.log.log_end_offset) for state in self.unflushed.values()]
        self.unflushed = {}
        return pending

    def end_flush(self, flushed: Iterable[tuple[PartitionState, int]]) -> None:
        for state, offset in flushed:
            self.advance_high_watermark(state, offset)

    # ----- fetch -----

    def read(self, state: PartitionState, offset: int, max_bytes: int) -> bytes:
        """Whole batches from `offset` that are below the high watermark."""
        if offset < state.log.log_start_offset or offset > state.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{state.log.log_start_offset}, {state.high_watermark}]",
            )
        if offset == state.high_watermark:
            return b""
        data = state.log.read(offset, max_bytes)
        if state.high_watermark < state.log.log_end_offset:
            data = _cut_at_offset(data, state.high_watermark)
        self.metrics.fetched(state.topic, data, offset)
        return data

    # ----- producer ids -----

    def new_producer_id(self, now_ms: int) -> int:
        # Unique across restarts without persisting a counter: the clock's milliseconds, then a sequence.
        candidate = now_ms * 1000
        self._next_producer_id = max(self._next_producer_id + 1, candidate)
        return self._next_producer_id

    def close(self) -> None:
        self.storage.close(clean=True)


def _cut_at_offset(data: bytes, end_offset: int) -> bytes:
    """Drop batches at or past `end_offset` (appended but not yet durable)."""
    keep = 0
    for pos, header in iter_batches(data):
        if header.base_offset >= end_offset:
            break
        keep = pos + header.size
    return data[:keep]
