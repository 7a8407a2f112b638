"""A partition log as a list of segments: offsets, rolling, reads across segments, timestamp lookups,
DeleteRecords and retention. Engines supply the segments (`segment.FileSegment`, `memory.MemorySegment`)
and what happens when segments appear, seal or go away.
"""

from __future__ import annotations

import errno
import logging
import threading
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import Protocol

from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.records import BatchHeader, parse_batch_header
from sluice.storage.api import NO_TIMESTAMP
from sluice.storage.batches import first_record_at_or_after
from sluice.storage.config import TopicConfig

_log = logging.getLogger("sluice.storage")
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})

# Index entries hold offsets relative to the segment base as int32.
_MAX_RELATIVE_OFFSET = 2**31 - 1


class Segment(Protocol):
    """One contiguous run of batches, the unit of rolling and deletion."""

    base_offset: int
    next_offset: int
    size_bytes: int
    # Largest batch maxTimestamp in the segment and the base offset of the first batch carrying it.
    max_timestamp: int
    offset_of_max_timestamp: int

    def append(
        self,
        batch: bytes | bytearray | memoryview,
        header: BatchHeader,
        base_offset: int,
        append_time_ms: int,
    ) -> None: ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one containing `offset`, within `max_bytes` but at least one."""
        ...

    def batch_containing(self, offset: int) -> bytes: ...

    def find_batch_by_timestamp(self, timestamp_ms: int, min_offset: int) -> bytes | None:
        """The first batch ending at or after `min_offset` whose maxTimestamp >= `timestamp_ms`."""
        ...

    def headers_from(self, offset: int) -> Iterator[BatchHeader]: ...

    def roll_age_ms(self, now_ms: int, incoming_max_timestamp: int) -> int:
        """How long this segment has been filling, as Kafka's LogSegment.timeWaitedForRoll measures."""
        ...

    def retention_timestamp_ms(self) -> int:
        """The time retention.ms is measured from: the largest timestamp, else the last write."""
        ...

    def seal(self) -> None:
        """No more appends will come; finish the indexes."""
        ...

    def close(self) -> None: ...

    def delete(self) -> None: ...


class DiskFull(KafkaError):
    """A write found no space (ENOSPC/EDQUOT). Nothing was appended; writes may resume once space is
    freed, unlike other write errors, which take the partition offline."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


def _out_of_range(offset: int, start: int, end: int) -> KafkaError:
    return KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is outside [{start}, {end}]")


class SegmentedLog:
    """The engine-independent part of a partition log (implements `api.PartitionLog` with its engine).

    Threading: only `flush` (defined by engines) runs off the event-loop thread. Structural changes that
    a flush snapshots (rolling) happen under `_segments_lock`; changes that close files (deleting
    segments, close) also hold `_flush_lock` so no fsync runs on a closed descriptor.
    """

    def __init__(self, segments: Sequence[Segment], log_start_offset: int, config: TopicConfig) -> None:
        if not segments:
            raise ValueError("a log always has an active segment")
        self._segments: list[Segment] = list(segments)
        self._bases: list[int] = [segment.base_offset for segment in self._segments]
        self._log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        self._size_bytes = sum(segment.size_bytes for segment in self._segments)
        self.config = config
        self._segments_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._closed = False
        # Set when an fsync failed: the kernel may have dropped the dirty pages, so a later fsync that
        # succeeds proves nothing (PostgreSQL's "fsyncgate"); Kafka takes the log dir offline likewise.
        self._failure: str | None = None

    # --- engine hooks -------------------------------------------------------------------------------

    def _new_segment(self, base_offset: int) -> Segment:
        raise NotImplementedError

    def _on_sealed(self, segment: Segment) -> None:
        """Called under `_segments_lock` right after `segment` stopped being the active one."""

    def _on_deleted(self, segments: list[Segment]) -> None:
        """Called under `_flush_lock` after `segments` left the log, before their files go."""

    def _on_log_start_changed(self) -> None:
        """Persist `log_start_offset` (the disk engine writes a checkpoint)."""

    # --- PartitionLog -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def offline_reason(self) -> str | None:
        """Why the log refuses reads and writes until restart (a failed write or fsync), else None."""
        return self._failure

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def append(
        self, batch: bytes | bytearray | memoryview, header: BatchHeader, *, append_time_ms: int
    ) -> int:
        if self._closed or self._failure:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self._failure or "log is closed")
        active = self._segments[-1]
        size = len(batch)
        try:
            config = self.config  # roll on size, age or offset range (checked inline: once per batch)
            if active.size_bytes and (
                active.size_bytes + size > config.segment_bytes
                or active.roll_age_ms(append_time_ms, header.max_timestamp) > config.segment_ms
                or active.next_offset + header.last_offset_delta - active.base_offset > _MAX_RELATIVE_OFFSET
            ):
                active = self._roll()
            base_offset = active.next_offset
            # A failed write leaves the segment's size unchanged, so the next append overwrites the debris.
            active.append(batch, header, base_offset, append_time_ms)
        except OSError as error:
            if error.errno in DISK_FULL_ERRNOS:
                raise DiskFull(f"append failed: {error}") from error
            # An I/O error may have left pages the kernel will never write: like Kafka's offline log dir,
            # the partition takes no more writes or reads until a restart recovers it from the file.
            self._failure = f"write failed, partition offline until restart: {error}"
            _log.error("%s: %s", self.describe(), self._failure)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self._failure) from error
        self._size_bytes += size
        return base_offset

    def describe(self) -> str:
        return f"partition log at offset {self.log_end_offset}"

    def _roll(self) -> Segment:
        old = self._segments[-1]
        old.seal()
        new = self._new_segment(old.next_offset)
        with self._segments_lock:
            self._on_sealed(old)
            self._segments.append(new)
            self._bases.append(new.base_offset)
        return new

    def read(self, offset: int, max_bytes: int) -> bytes:
        end = self.log_end_offset
        if offset < self._log_start_offset or offset > end:
            raise _out_of_range(offset, self._log_start_offset, end)
        if offset == end:
            return b""
        segment = self._segment_for(offset)
        if not segment.size_bytes:
            # A gap at the tail: nothing at or after `offset` below the log end. The cleaner removed the
            # last records before an empty active segment, or a crash lost unflushed batches after a roll
            # (their offsets are not reused). Kafka answers such a fetch with no records, too.
            return b""
        return segment.read(offset, max_bytes)

    def _segment_for(self, offset: int) -> Segment:
        index = bisect_right(self._bases, offset) - 1
        # A compacted segment may end before the next one starts (its last records were cleaned away),
        # or hold nothing at all: the offset then lives in a later segment.
        last = len(self._segments) - 1
        while index < last and (
            self._segments[index].next_offset <= offset or not self._segments[index].size_bytes
        ):
            index += 1
        return self._segments[index]

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        start = self._log_start_offset
        for segment in self._segments[bisect_right(self._bases, start) - 1 :]:
            if segment.max_timestamp < timestamp_ms or segment.next_offset <= start:
                continue
            batch = segment.find_batch_by_timestamp(timestamp_ms, start)
            if batch is not None:
                return first_record_at_or_after(batch, parse_batch_header(batch), timestamp_ms, start)
        return None

    def max_timestamp(self) -> tuple[int, int]:
        start = self._log_start_offset
        best_timestamp, best_offset, best_segment = NO_TIMESTAMP, -1, None
        for segment in self._segments[bisect_right(self._bases, start) - 1 :]:
            timestamp, offset = segment.max_timestamp, segment.offset_of_max_timestamp
            if offset < start and segment.next_offset > start:
                # The segment's largest timestamp was removed by DeleteRecords: look at what is left.
                timestamp, offset = NO_TIMESTAMP, -1
                for header in segment.headers_from(start):
                    if header.max_timestamp > timestamp:
                        timestamp, offset = header.max_timestamp, header.base_offset
            if timestamp > best_timestamp:
                best_timestamp, best_offset, best_segment = timestamp, offset, segment
        if best_segment is None:
            return NO_TIMESTAMP, NO_TIMESTAMP
        batch = best_segment.batch_containing(best_offset)
        found = first_record_at_or_after(batch, parse_batch_header(batch), best_timestamp, start)
        assert found is not None
        return found

    def delete_records_before(self, offset: int) -> int:
        end = self.log_end_offset
        if offset == -1:
            offset = end
        if offset < 0 or offset > end:
            raise _out_of_range(offset, self._log_start_offset, end)
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        if offset == end and self._segments[-1].size_bytes:
            # Everything is gone: start a fresh segment so the old active one can be deleted too.
            self._roll()
        self._on_log_start_changed()
        self._delete_prefix(self._count_below_log_start())
        return self._log_start_offset

    def _count_below_log_start(self) -> int:
        # A segment is wholly below the log start when its successor starts at or before it (its own
        # next_offset may be lower: compaction leaves gaps at segment ends).
        count = 0
        for successor in self._segments[1:]:
            if successor.base_offset > self._log_start_offset:
                break
            count += 1
        return count

    def apply_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        candidates = self._segments[:-1]
        by_time = 0
        if retention_ms >= 0:
            for segment in candidates:
                if now_ms - segment.retention_timestamp_ms() <= retention_ms:
                    break
                by_time += 1
        by_size = 0
        if retention_bytes >= 0:
            excess = self._size_bytes - retention_bytes
            for segment in candidates:
                if segment.size_bytes > excess:
                    break
                excess -= segment.size_bytes
                by_size += 1
        count = max(by_time, by_size, self._count_below_log_start())
        if count == 0:
            return 0
        self._delete_prefix(count)
        new_start = self._segments[0].base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self._on_log_start_changed()
        return count

    def _delete_prefix(self, count: int) -> None:
        if count <= 0:
            return
        with self._flush_lock:
            with self._segments_lock:
                doomed = self._segments[:count]
                del self._segments[:count]
                del self._bases[:count]
            self._size_bytes -= sum(segment.size_bytes for segment in doomed)
            self._on_deleted(doomed)
            for segment in doomed:
                segment.delete()

    def iter_batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        start = max(from_offset, self._log_start_offset)
        if start >= self.log_end_offset:
            return
        for segment in self._segments[bisect_right(self._bases, start) - 1 :]:
            yield from segment.headers_from(start)

    def update_config(self, config: TopicConfig) -> None:
        self.config = config

    def flush(self) -> None:
        """Engines with durable storage override this; in memory there is nothing to sync."""

    def close(self) -> None:
        with self._flush_lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._segments:
                segment.close()
