"""The heavy part of a pass, run in a worker process: build the key map, then write each group's cleaned
segment into `<partition>/.cleaning/`. Never touches the live segment files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sluice.protocol.control_batches import ControlRecordType, decode_control_key
from sluice.protocol.records import BatchHeader, Record, decode_batch, encode_batch, parse_batch_header
from sluice.storage.compaction.checkpoint import CleanerCheckpoint
from sluice.storage.compaction.offset_map import (
    CLEAN,
    KEEP,
    NO_FACTS,
    BatchFates,
    OffsetMap,
    TxnFacts,
    build_offset_map,
)
from sluice.storage.compaction.plan import group_segments
from sluice.storage.compaction.reader import SegmentRef, Throttler, iter_segment_batches
from sluice.storage.config import TopicConfig
from sluice.storage.loader import CLEANING_DIR
from sluice.storage.segment import FileSegment

_SYNC_EVERY = 1024 * 1024


@dataclass(slots=True)
class GroupResult:
    changed: bool = False
    kept_tombstones: bool = False
    records_removed: int = 0
    bytes_written: int = 0


def clean_batch(
    batch: memoryview,
    header: BatchHeader,
    offset_map: OffsetMap,
    drop_tombstones: bool,
    result: GroupResult,
    fates: BatchFates | None = None,
) -> bytes | memoryview | None:
    """The batch with obsolete records removed: the same bytes when nothing goes, None when all do.
    Batches must come in log order: a marker's fate depends on what was kept of its transaction."""
    fates = fates or BatchFates(NO_FACTS)
    if header.is_control:
        return clean_marker(batch, header, drop_tombstones, result, fates)
    out = clean_data_batch(batch, header, offset_map, drop_tombstones, result, fates)
    if header.is_transactional and out is not None:
        fates.txn_kept.add(header.producer_id)
    return out


def clean_marker(
    batch: memoryview, header: BatchHeader, drop_tombstones: bool, result: GroupResult, fates: BatchFates
) -> memoryview | None:
    """Kafka's rule for COMMIT markers: one goes once nothing of its transaction is left and its segment
    was cleaned delete.retention.ms ago (a reader that saw the data had that long to see the marker
    too); until then it counts as a tombstone, so a pass comes back for it.

    ABORT markers stay: read_committed readers get the aborted-transaction index's entry for the
    transaction and skip that producer's batches until they meet its ABORT marker, so the marker may only
    go together with its index entry (Kafka rewrites the cleaned segment's index), which sluice's
    broker-owned index does not support yet."""
    _, records = decode_batch(batch)  # also: copied byte for byte, but never a corrupt one
    producer_id = header.producer_id
    had_data = producer_id in fates.txn_kept
    fates.txn_kept.discard(producer_id)
    commit = len(records) == 1 and decode_control_key(records[0].key) is ControlRecordType.COMMIT
    if not commit or producer_id < 0 or had_data or header.last_offset >= fates.facts.last_stable_offset:
        return batch
    if drop_tombstones:
        result.changed = True
        result.records_removed += header.record_count
        return None
    result.kept_tombstones = True
    return batch


def clean_data_batch(
    batch: memoryview,
    header: BatchHeader,
    offset_map: OffsetMap,
    drop_tombstones: bool,
    result: GroupResult,
    fates: BatchFates,
) -> bytes | memoryview | None:
    fate = fates.of(header)
    if fate == KEEP:
        decode_batch(batch)  # copied byte for byte, but never a corrupt one
        return batch
    _, records = decode_batch(batch)
    kept: list[Record] = []
    for record in records if fate == CLEAN else ():
        offset = header.base_offset + record.offset_delta
        if record.key is None:
            continue
        latest = offset_map.get(record.key)
        if latest is not None and latest > offset:
            continue
        if record.value is None:
            if drop_tombstones:
                continue
            result.kept_tombstones = True
        kept.append(record)
    removed = len(records) - len(kept)
    if removed == 0:
        return batch
    result.changed = True
    result.records_removed += removed
    if not kept and header.base_offset not in fates.facts.last_batches:
        return None
    log_append = header.is_log_append_time
    return encode_batch(
        kept,
        base_offset=header.base_offset,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp if log_append or not kept else None,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        is_transactional=header.is_transactional,
        timestamp_type_log_append=log_append,
        # Kept even when the last record went: consumers and producer state read the batch's last offset.
        last_offset_delta=header.last_offset_delta,
    )


@dataclass(frozen=True, slots=True)
class PreparedGroup:
    replaced: tuple[int, ...]  # base offsets of the segments the cleaned one replaces
    entry: tuple[int, bool]  # its checkpoint entry: (cleaned-at ms, kept tombstones)
    written: bool  # False when a lone segment lost nothing: no file, no swap
    records_removed: int = 0


@dataclass(frozen=True, slots=True)
class Prepared:
    map_end: int
    groups: list[PreparedGroup]
    bytes_read: int


@dataclass(frozen=True, slots=True)
class CleaningJob:
    """Everything the heavy part of one pass needs, as plain data (it may go to a worker process)."""

    directory: str
    segments: list[SegmentRef]
    first_dirty: int
    checkpoint_segments: dict[int, tuple[int, bool]]
    config: TopicConfig
    now_ms: int
    dedupe_buffer_size: int
    io_max_bytes_per_second: float
    facts: TxnFacts = NO_FACTS


def prepare_cleaning(job: CleaningJob) -> Prepared:
    """The heavy part of a pass (it runs in a worker process under the broker): build the key map from
    the dirty segments and write each group's cleaned segment, fsynced with its indexes, into
    `<directory>/.cleaning/<base>.*`. Never touches the live segment files.
    """
    cleaning = Path(job.directory) / CLEANING_DIR
    cleaning.mkdir(exist_ok=True)
    for stale in cleaning.iterdir():
        stale.unlink()
    first_dirty = job.first_dirty
    throttler = Throttler(job.io_max_bytes_per_second)
    checkpoint = CleanerCheckpoint(first_dirty, -1, job.checkpoint_segments)
    fates = BatchFates(job.facts)
    dirty = [s for s in job.segments if s.base_offset >= first_dirty]
    offset_map = OffsetMap(job.dedupe_buffer_size)
    map_end = build_offset_map(dirty, offset_map, throttler, fates) if dirty else first_dirty
    to_clean = [s for s in job.segments if s.base_offset < max(map_end, first_dirty)]
    groups = [
        _rewrite_group(cleaning, group, offset_map, checkpoint, job, throttler, fates)
        for group in group_segments(to_clean, checkpoint, first_dirty, job.config.segment_bytes)
    ]
    return Prepared(map_end, groups, sum(s.size_bytes for s in job.segments))


def _rewrite_group(
    cleaning: Path,
    group: list[SegmentRef],
    offset_map: OffsetMap,
    checkpoint: CleanerCheckpoint,
    job: CleaningJob,
    throttler: Throttler,
    fates: BatchFates,
) -> PreparedGroup:
    config, now_ms, first_dirty = job.config, job.now_ms, job.first_dirty
    base = group[0].base_offset
    cleaned = FileSegment(cleaning, base, config.index_interval_bytes, create=True)
    result = GroupResult()
    previously: list[tuple[int, bool]] = []
    unsynced = 0
    try:
        for segment in group:
            state = checkpoint.segments.get(segment.base_offset)
            was_clean = segment.base_offset < first_dirty and state is not None
            if was_clean and state is not None:
                previously.append(state)
            drop_tombstones = (
                was_clean and state is not None and state[0] + config.delete_retention_ms <= now_ms
            )
            for batch, header in iter_segment_batches(segment, throttler):
                out = clean_batch(batch, header, offset_map, drop_tombstones, result, fates)
                if out is None:
                    continue
                out_header = header if out is batch else parse_batch_header(out)
                cleaned.append(out, out_header, out_header.base_offset, now_ms)
                throttler.account(len(out))
                unsynced += len(out)
                if unsynced >= _SYNC_EVERY:
                    # Write back as we go: one fsync of a whole segment at the end would put tens of MB in
                    # front of the producers' own fsyncs at once.
                    cleaned.sync()
                    unsynced = 0
        # Only the pass that first cleans a segment starts its tombstone clock; a group never mixes
        # segments whose tombstones have different clocks (see group_segments).
        all_clean = len(previously) == len(group)
        entry = (max(ms for ms, _ in previously) if all_clean else now_ms, result.kept_tombstones)
        replaced = tuple(s.base_offset for s in group)
        if len(group) == 1 and not result.changed:
            cleaned.delete()
            return PreparedGroup(replaced, entry, written=False)
        cleaned.seal()
        cleaned.make_durable()
        cleaned.close()
        return PreparedGroup(replaced, entry, written=True, records_removed=result.records_removed)
    except BaseException:
        cleaned.delete()
        raise


Prepare = Callable[[CleaningJob], Prepared]
