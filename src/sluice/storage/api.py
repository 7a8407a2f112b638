"""The storage interface: one partition log and one topic metadata store, implemented by every engine.

Engines are siblings (`memory.MemoryStorage`, `disk.DiskStorage`) and pass one contract test suite.
Batches are record batch v2 bytes; storage rewrites only the 8-byte baseOffset (not covered by the CRC)
and never decodes records on the append or read paths.

Threading: every method except `PartitionLog.flush` must be called from one thread (the broker's event
loop). `flush` may run in a worker thread concurrently with appends, reads and rolls on that thread;
see `PartitionLog.flush`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sluice.protocol.records import BatchHeader
from sluice.storage.config import TopicConfig

# Kafka's "no timestamp" value, also what ListOffsets answers when it has nothing to point at.
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    internal: bool = False

    @property
    def config(self) -> TopicConfig:
        return TopicConfig.from_configs(self.configs)


@runtime_checkable
class PartitionLog(Protocol):
    """An append-only sequence of record batches with contiguous offsets.

    Single node, so the high watermark equals `log_end_offset`.
    """

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def offline_reason(self) -> str | None:
        """Why the log refuses reads and writes until restart (a write or fsync failed), else None."""
        ...

    def append(
        self, batch: bytes | bytearray | memoryview, header: BatchHeader, *, append_time_ms: int
    ) -> int:
        """Store an already validated batch at `log_end_offset` and return the base offset it got.

        The batch's baseOffset field is rewritten in storage's copy; `batch` itself is not modified.
        Rolls the active segment first when segment.bytes or segment.ms says so. Does not fsync.
        """
        ...

    def flush(self) -> None:
        """Make every batch appended before this call started durable (fsync).

        Safe to call from one worker thread while the event-loop thread keeps appending, reading and
        rolling; concurrent flush calls are serialised. Appends that race with a flush may or may not be
        covered by it; they are covered by the next one.
        """
        ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches starting with the one containing `offset`, at most `max_bytes` of them, but
        always at least one batch when one exists (so consumers make progress past a large batch).

        Returns b"" at `log_end_offset`; raises KafkaError(OFFSET_OUT_OF_RANGE) outside
        [log_start_offset, log_end_offset]. May stop at a segment boundary, like Kafka.
        """
        ...

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record at or after `log_start_offset` whose timestamp is
        >= `timestamp_ms`, or None when there is none (ListOffsets then answers -1).

        Exact per record for uncompressed batches; for compressed batches it answers the batch's first
        offset and its maxTimestamp (never later than the exact answer, so no record is skipped).
        """
        ...

    def max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record with the largest timestamp, for ListOffsets
        MAX_TIMESTAMP; (-1, -1) when no batch carries a timestamp. Record-exact for uncompressed batches,
        the batch's first offset for compressed ones. Records below `log_start_offset` are ignored at batch
        granularity: a batch straddling the log start still counts with its maxTimestamp.
        """
        ...

    def delete_records_before(self, offset: int) -> int:
        """Advance `log_start_offset` to `offset` (-1 means the log end), drop whole segments below it and
        persist it; returns the new log start. Raises OFFSET_OUT_OF_RANGE past the log end.
        """
        ...

    def apply_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Delete whole old segments (never the active one) older than `retention_ms` or beyond
        `retention_bytes` (-1 disables either); returns how many segments were deleted.
        """
        ...

    def iter_batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of the batch containing `from_offset` (or the first batch, if earlier) onwards.

        Lazy: consume it before deleting records, applying retention or closing the log.
        """
        ...

    def close(self) -> None: ...


@runtime_checkable
class CompactableLog(PartitionLog, Protocol):
    """Optional capability: a partition log the cleaner (sluice.storage.compaction) can compact. The disk
    engine's logs are; `Storage.compactable_log` hands them out, so nothing above storage tests classes."""

    @property
    def directory(self) -> Path: ...

    def cleanable_segments(self) -> list[Any]:
        """The sealed, durable segments the cleaner may rewrite, oldest first. Safe from any thread."""
        ...

    def swap_cleaned(
        self,
        replaced: list[Any],
        cleaned: Any,
        manifest_pending: Path,
        crash_point: Callable[[str], None] = ...,
    ) -> bool:
        """Owner thread only: put `cleaned` in place of `replaced`; False when they are gone."""
        ...


@runtime_checkable
class Storage(Protocol):
    """Topics and their partition logs. Topic names are Kafka's legal names ([a-zA-Z0-9._-], <= 249)."""

    @property
    def cluster_id(self) -> str:
        """Generated once per data directory and kept across restarts."""
        ...

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str], *, internal: bool = False
    ) -> TopicMeta:
        """Raises TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS or INVALID_CONFIG."""
        ...

    def delete_topic(self, name: str) -> None:
        """Forget the topic and remove its data. Raises UNKNOWN_TOPIC_OR_PARTITION."""
        ...

    def create_partitions(self, name: str, new_total: int) -> TopicMeta:
        """Grow the topic to `new_total` partitions; raises INVALID_PARTITIONS unless it grows."""
        ...

    def alter_topic_configs(self, name: str, configs: Mapping[str, str | None]) -> TopicMeta:
        """Merge `configs` into the topic's configs; a None value removes the key (back to default).
        The broker computes full replacement (AlterConfigs) by passing None for dropped keys.
        Raises INVALID_CONFIG with the validation message.
        """
        ...

    def topics(self) -> list[TopicMeta]: ...

    def topic(self, name: str) -> TopicMeta | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None: ...

    def log(self, topic: str, partition: int) -> PartitionLog:
        """Raises UNKNOWN_TOPIC_OR_PARTITION."""
        ...

    # ----- optional capabilities: an engine without one answers None -----

    @property
    def data_dir(self) -> Path | None:
        """The directory the engine keeps its files in (docs/storage.md maps it); None in memory."""
        ...

    def compactable_log(self, topic: str, partition: int) -> CompactableLog | None:
        """The partition's log as the cleaner sees it, or None when this engine does not compact.
        Raises UNKNOWN_TOPIC_OR_PARTITION."""
        ...

    def close(self, clean: bool = True) -> None:
        """Close every log; with `clean`, flush everything and mark the shutdown clean so the next open
        skips recovery scans.
        """
        ...
