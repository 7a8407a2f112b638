"""Planning a pass: which segments are cleanable, whether a pass is due, and how they group."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from sluice.protocol.records import BATCH_HEADER_SIZE, parse_batch_header
from sluice.storage.compaction.checkpoint import CleanerCheckpoint
from sluice.storage.compaction.reader import SegmentRef
from sluice.storage.config import TopicConfig
from sluice.storage.segment import FileSegment

_INT32_MAX = 2**31 - 1


class CleanableLog(Protocol):
    """What planning reads of a log (sluice.storage.api.CompactableLog)."""

    @property
    def log_start_offset(self) -> int: ...

    def cleanable_segments(self) -> list[FileSegment]: ...


@dataclass(slots=True)
class Plan:
    segments: list[FileSegment]  # cleanable: sealed, durable, old enough for min.compaction.lag.ms
    first_dirty_offset: int
    clean_bytes: int
    dirty_bytes: int
    must_clean: bool  # max.compaction.lag.ms passed, or tombstones are due

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def worth_cleaning(self, config: TopicConfig) -> bool:
        if not self.segments:
            return False
        return self.must_clean or (
            self.dirty_bytes > 0 and self.dirty_ratio >= config.min_cleanable_dirty_ratio
        )


def _first_batch_timestamp(segment: FileSegment) -> int:  # the first dirty segment's oldest batch
    fd = os.open(segment.log_path, os.O_RDONLY)
    try:
        head = os.pread(fd, BATCH_HEADER_SIZE, 0)
    finally:
        os.close(fd)
    return parse_batch_header(head).base_timestamp if len(head) == BATCH_HEADER_SIZE else -1


def plan_cleaning(log: CleanableLog, config: TopicConfig, now_ms: int, checkpoint: CleanerCheckpoint) -> Plan:
    segments: list[FileSegment] = []
    for segment in log.cleanable_segments():
        if config.min_compaction_lag_ms and segment.max_timestamp > now_ms - config.min_compaction_lag_ms:
            break
        segments.append(segment)
    first_dirty = max(checkpoint.first_dirty_offset, log.log_start_offset)
    clean_bytes = sum(s.size_bytes for s in segments if s.base_offset < first_dirty)
    dirty = [s for s in segments if s.base_offset >= first_dirty]
    dirty_bytes = sum(s.size_bytes for s in dirty)
    must_clean = False
    if dirty and config.max_compaction_lag_ms < 2**63 - 1:
        first_timestamp = _first_batch_timestamp(dirty[0])
        must_clean = 0 <= first_timestamp < now_ms - config.max_compaction_lag_ms
    deadline = checkpoint.tombstone_deadline_ms(config.delete_retention_ms)
    if deadline is not None and now_ms >= deadline:
        must_clean = True
    return Plan(segments, first_dirty, clean_bytes, dirty_bytes, must_clean)


def group_segments(
    segments: list[SegmentRef], checkpoint: CleanerCheckpoint, first_dirty: int, segment_bytes: int
) -> list[list[SegmentRef]]:
    """Consecutive segments whose sizes add up to at most segment.bytes and whose offsets fit one index;
    a segment that keeps tombstones from an earlier pass stays alone, so its deadline stays its own.
    """
    groups: list[list[SegmentRef]] = []
    current: list[SegmentRef] = []
    size = 0

    def isolated(segment: SegmentRef) -> bool:
        state = checkpoint.segments.get(segment.base_offset)
        return segment.base_offset < first_dirty and state is not None and state[1]

    for segment in segments:
        fits = (
            current
            and not isolated(segment)
            and not isolated(current[0])
            and size + segment.size_bytes <= segment_bytes
            and segment.next_offset - 1 - current[0].base_offset <= _INT32_MAX
        )
        if not fits and current:
            groups.append(current)
            current, size = [], 0
        current.append(segment)
        size += segment.size_bytes
    if current:
        groups.append(current)
    return groups
