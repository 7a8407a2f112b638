"""The in-memory engine: segments are lists of batch bytes. For tests and `--data-dir :memory:`."""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from collections.abc import Iterator

from sluice.protocol.records import BatchHeader
from sluice.storage.api import NO_TIMESTAMP, TopicMeta
from sluice.storage.batches import BASE_OFFSET
from sluice.storage.config import TopicConfig
from sluice.storage.log import SegmentedLog
from sluice.storage.metadata import TopicStore, new_cluster_id


class MemorySegment:
    """A segment whose batches live in a list; positions are list indexes."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.size_bytes = 0
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self._batches: list[bytes] = []
        self._headers: list[BatchHeader] = []
        self._bases: list[int] = []
        self._first_batch_timestamp = NO_TIMESTAMP
        self._created_ms: int | None = None
        self._last_append_ms = 0

    def append(
        self,
        batch: bytes | bytearray | memoryview,
        header: BatchHeader,
        base_offset: int,
        append_time_ms: int,
    ) -> None:
        stored = bytearray(batch)
        BASE_OFFSET.pack_into(stored, 0, base_offset)
        if not self._batches:
            self._first_batch_timestamp = header.max_timestamp
            self._created_ms = append_time_ms
        self._batches.append(bytes(stored))
        self._headers.append(dataclasses.replace(header, base_offset=base_offset))
        self._bases.append(base_offset)
        self.size_bytes += len(stored)
        self.next_offset = base_offset + header.last_offset_delta + 1
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = base_offset
        self._last_append_ms = append_time_ms

    def _index_of(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int) -> bytes:
        first = self._index_of(offset)
        last = first + 1
        total = len(self._batches[first])
        while last < len(self._batches) and total + len(self._batches[last]) <= max_bytes:
            total += len(self._batches[last])
            last += 1
        return b"".join(self._batches[first:last])

    def batch_containing(self, offset: int) -> bytes:
        return self._batches[self._index_of(offset)]

    def find_batch_by_timestamp(self, timestamp_ms: int, min_offset: int) -> bytes | None:
        for n in range(self._index_of(min_offset), len(self._headers)):
            header = self._headers[n]
            if header.max_timestamp >= timestamp_ms and header.last_offset >= min_offset:
                return self._batches[n]
        return None

    def headers_from(self, offset: int) -> Iterator[BatchHeader]:
        for n in range(self._index_of(offset), len(self._headers)):
            yield dataclasses.replace(self._headers[n])

    def roll_age_ms(self, now_ms: int, incoming_max_timestamp: int) -> int:
        if self._first_batch_timestamp >= 0:
            return incoming_max_timestamp - self._first_batch_timestamp
        return now_ms - (self._created_ms if self._created_ms is not None else now_ms)

    def retention_timestamp_ms(self) -> int:
        return self.max_timestamp if self.max_timestamp > 0 else self._last_append_ms

    def seal(self) -> None:
        pass

    def close(self) -> None:
        pass

    def delete(self) -> None:
        self._batches.clear()
        self._headers.clear()
        self._bases.clear()


class MemoryPartitionLog(SegmentedLog):
    def __init__(self, config: TopicConfig) -> None:
        super().__init__([MemorySegment(0)], 0, config)

    def _new_segment(self, base_offset: int) -> MemorySegment:
        return MemorySegment(base_offset)


class MemoryStorage(TopicStore):
    """`api.Storage` in dicts and lists; nothing survives the process."""

    def __init__(self, cluster_id: str | None = None) -> None:
        super().__init__(cluster_id or new_cluster_id(), {})

    def _open_log(self, meta: TopicMeta, partition: int) -> MemoryPartitionLog:
        return MemoryPartitionLog(meta.config)

    @property
    def data_dir(self) -> None:
        return None  # nothing on disk: no log dir sizes, no verify/repair

    def compactable_log(self, topic: str, partition: int) -> None:
        return None  # the memory engine does not compact

    def close(self, clean: bool = True) -> None:
        self._close_logs()
        self._topics.clear()
