"""Log compaction (Kafka's LogCleaner): keep the last record of each key in the closed segments of topics
whose cleanup.policy contains `compact`.

One pass over one partition, as Kafka's Cleaner does it:
1. Plan. The cleanable segments are the sealed, already durable ones (never the active segment), up to
   the first whose newest record is younger than min.compaction.lag.ms. Those below the cleaner's
   checkpoint ("first dirty offset") were cleaned before; the rest are dirty. A pass runs when
   dirty / (clean + dirty) bytes reaches min.cleanable.dirty.ratio, when dirty data is older than
   max.compaction.lag.ms, or when kept tombstones have outlived delete.retention.ms.
2. Map. The dirty segments are read into an `OffsetMap` (key digest -> last offset) until its memory
   budget (log_cleaner_dedupe_buffer_size) is spent; the map then ends at a segment boundary.
3. Rewrite. Every cleanable segment up to the map's end is copied, in groups no larger than
   segment.bytes, into a new segment under `<partition>/.cleaning/`, keeping a record only when no later
   record of its key is in the map. Offsets, timestamps and headers never change (the log gets gaps); a
   batch that loses records is re-encoded with its own codec, base offset, lastOffsetDelta and producer
   fields; a batch that loses none is copied byte for byte.
4. Swap, on the thread that owns the log (the event loop), in a few file renames: see
   `DiskPartitionLog.swap_cleaned` and `loader.settle_cleaner_swap` for the crash protocol.

Tombstones (null values) are kept for delete.retention.ms after the pass that first cleaned their
segment; the time is remembered per segment in the cleaner checkpoint, and a segment still holding
tombstones is never grouped with another, so merging cannot move any tombstone's deadline.

Transactions (`TxnFacts`, taken from the owner's producer state when the pass starts): a transactional
batch that ends at or above the last stable offset may still be in an open transaction, so it is copied
unchanged and never enters the map. Below the LSO every transaction is decided: a batch inside an
aborted transaction of the aborted-transaction index is removed (its index entry stays, so read_committed
readers positioned before the gap still filter correctly); a committed one is compacted by key like any
other. A COMMIT marker stays while any batch of its transaction is left; once none is, it is treated
like a tombstone and removed delete.retention.ms after its segment was first cleaned, as in Kafka. ABORT
markers are kept (see `_clean_marker`).

Producer state is rebuilt from batch headers at start, so the newest data batch of each producer is never
removed whole: when all its records go it is kept as an empty batch with its offsets and sequence, as
Kafka does, so an idempotent producer that outlives a broker restart does not see a sequence gap.

Keyless records (possible only from before the topic became compacted) are removed, as Kafka does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sluice.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    ControlRecordType,
    Record,
    decode_batch,
    decode_control_key,
    encode_batch,
    iter_batches,
    parse_batch_header,
)
from sluice.storage.config import TopicConfig
from sluice.storage.loader import CLEANING_DIR, SWAP_MANIFEST
from sluice.storage.metadata import sync_directory, write_atomically
from sluice.storage.segment import FileSegment

if TYPE_CHECKING:
    from sluice.storage.disk import DiskPartitionLog

CHECKPOINT_FILE = "cleaner.checkpoint"
# Kafka's SkimpyOffsetMap spends 24 bytes a key (MD5 + offset). A Python dict of 128-bit int digests
# to int offsets costs about this much per entry, so the budget bounds real memory, not a wish.
BYTES_PER_MAP_ENTRY = 160
_READ_CHUNK = 1024 * 1024
_SYNC_EVERY = 1024 * 1024
_INT32_MAX = 2**31 - 1
_log = logging.getLogger("sluice.cleaner")
T = TypeVar("T")


class CleaningAborted(Exception):
    """The cleaner is stopping, or the log changed under it; the pass leaves the log as it was."""


# --- persistent per-partition state -----------------------------------------------------------------


@dataclass(slots=True)
class CleanerCheckpoint:
    """`cleaner.checkpoint` in the partition directory (JSON, written atomically)."""

    first_dirty_offset: int = 0
    last_cleaned_ms: int = -1
    # base offset -> (time of the pass that first cleaned the segment, whether it kept tombstones)
    segments: dict[int, tuple[int, bool]] = field(default_factory=dict)

    @classmethod
    def read(cls, directory: Path) -> CleanerCheckpoint:
        try:
            raw = json.loads((directory / CHECKPOINT_FILE).read_bytes())
            return cls(
                int(raw["first_dirty_offset"]),
                int(raw["last_cleaned_ms"]),
                {int(base): (int(ms), bool(tombs)) for base, (ms, tombs) in raw["segments"].items()},
            )
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError):
            _log.warning("unreadable %s in %s; the whole log counts as dirty", CHECKPOINT_FILE, directory)
            return cls()

    def write(self, directory: Path) -> None:
        document = {
            "first_dirty_offset": self.first_dirty_offset,
            "last_cleaned_ms": self.last_cleaned_ms,
            "segments": {str(base): [ms, tombs] for base, (ms, tombs) in self.segments.items()},
        }
        write_atomically(directory / CHECKPOINT_FILE, json.dumps(document).encode())

    def tombstone_deadline_ms(self, delete_retention_ms: int) -> int | None:
        deadlines = [ms + delete_retention_ms for ms, tombs in self.segments.values() if tombs]
        return min(deadlines) if deadlines else None


# --- the key map --------------------------------------------------------------------------------------


class OffsetMap:
    """Key -> offset of its last record, keyed by a 128-bit BLAKE2b digest (Kafka uses MD5), with a
    memory budget: `put` of a new key returns False once the map is full.
    """

    def __init__(self, memory_bytes: int) -> None:
        self.capacity = max(1, memory_bytes // BYTES_PER_MAP_ENTRY)
        self._offsets: dict[int, int] = {}
        self.last_offset = -1

    @staticmethod
    def _digest(key: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(key, digest_size=16).digest(), "big")

    def put(self, key: bytes, offset: int) -> bool:
        digest = self._digest(key)
        if digest not in self._offsets and len(self._offsets) >= self.capacity:
            return False
        self._offsets[digest] = offset
        self.last_offset = offset
        return True

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(self._digest(key))

    def __len__(self) -> int:
        return len(self._offsets)


# --- throttling and counters --------------------------------------------------------------------------


class Throttler:
    """Keeps the cleaner's I/O under `bytes_per_second` (log.cleaner.io.max.bytes.per.second); the
    sleep and clock are passed in so the pure parts never sleep on their own.
    """

    def __init__(
        self,
        bytes_per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self._clock, self._sleep = clock, sleep
        self._start = clock()
        self._bytes = 0

    def account(self, size: int) -> None:
        if self.bytes_per_second <= 0 or self.bytes_per_second >= 1e300:
            return
        self._bytes += size
        elapsed = self._clock() - self._start
        wanted = self._bytes / self.bytes_per_second
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
        if elapsed > 1.0:  # a fresh window now and then, so an idle spell is not credited forever
            self._start, self._bytes = self._clock(), 0


@dataclass
class CleanerStats:
    """Counters for the metrics engineer to publish (all totals since start, or latest values)."""

    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    segments_swapped: int = 0
    failures: int = 0
    uncleanable_partitions: int = 0
    last_pass_duration_ms: int = 0
    # Kafka's max-dirty-percent and max-compaction-delay-secs: the worst partition at the last look.
    max_dirty_ratio: float = 0.0
    max_compaction_delay_ms: int = 0


# --- one partition -------------------------------------------------------------------------------------


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


def plan_cleaning(log: DiskPartitionLog, config: TopicConfig, now_ms: int) -> Plan:
    checkpoint = log.cleaner_checkpoint
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


def _iter_segment_batches(
    segment: SegmentRef, throttler: Throttler
) -> Iterator[tuple[memoryview, BatchHeader]]:
    """(bytes, header) of each batch of a sealed segment, read through a descriptor of our own so that
    the owner closing the segment cannot pull the file out from under this thread.
    """
    fd = os.open(segment.log_path, os.O_RDONLY)
    try:
        end = segment.size_bytes
        position = 0
        while position < end:
            chunk = os.pread(fd, min(_READ_CHUNK, end - position), position)
            throttler.account(len(chunk))
            view = memoryview(chunk)
            consumed = 0
            for pos, header in iter_batches(view):
                yield view[pos : pos + header.size], header
                consumed = pos + header.size
            if consumed == 0:
                if len(chunk) < LOG_OVERHEAD:
                    return
                # One batch larger than the chunk: read it whole.
                size = LOG_OVERHEAD + parse_batch_header(chunk).batch_length
                whole = os.pread(fd, size, position)
                if len(whole) < size:
                    return
                yield memoryview(whole), parse_batch_header(whole)
                consumed = size
            position += consumed
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class TxnFacts:
    """What the owner knows about the partition's producers when a pass starts (plain data: it goes to the
    worker process). The default decides nothing: every transactional batch is kept as it is."""

    last_stable_offset: int = -1  # transactional batches ending below it are decided
    aborted: tuple[tuple[int, int, int], ...] = ()  # (producer id, first offset, abort marker offset)
    last_batches: frozenset[int] = frozenset()  # base offset of each producer's newest data batch


NO_FACTS = TxnFacts()
_KEEP, _DROP, _CLEAN = 0, 1, 2


class _Fates:
    """Per batch: keep as it is (control, or possibly in an open transaction), drop (aborted), or clean
    by key (plain, or a committed transaction)."""

    def __init__(self, facts: TxnFacts) -> None:
        self.facts = facts
        self._aborted: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first, last in facts.aborted:
            self._aborted.setdefault(producer_id, []).append((first, last))
        # Producers whose current transaction (since their last marker) still has a batch in the output.
        self.txn_kept: set[int] = set()

    def of(self, header: BatchHeader) -> int:
        if header.is_control:
            return _KEEP
        if not header.is_transactional:
            return _CLEAN
        if header.last_offset >= self.facts.last_stable_offset:
            return _KEEP
        for first, last in self._aborted.get(header.producer_id, ()):
            if first <= header.base_offset <= last:
                return _DROP
        return _CLEAN


def build_offset_map(
    dirty: list[SegmentRef], offset_map: OffsetMap, throttler: Throttler, fates: _Fates | None = None
) -> int:
    """Fill `offset_map` from the dirty segments; returns the offset the map covers up to (exclusive):
    the end of the last segment that fit whole, or the last record that fit when not even one did.
    """
    fates = fates or _Fates(NO_FACTS)
    covered_end = dirty[0].base_offset
    for n, segment in enumerate(dirty):
        for batch, header in _iter_segment_batches(segment, throttler):
            if fates.of(header) != _CLEAN:
                continue
            _, records = decode_batch(batch)
            for record in records:
                if record.key is not None and not offset_map.put(
                    record.key, header.base_offset + record.offset_delta
                ):
                    if n == 0:
                        return offset_map.last_offset + 1
                    return covered_end
        covered_end = dirty[n + 1].base_offset if n + 1 < len(dirty) else segment.next_offset
    return covered_end


@dataclass(slots=True)
class _GroupResult:
    changed: bool = False
    kept_tombstones: bool = False
    records_removed: int = 0
    bytes_written: int = 0


def _clean_batch(
    batch: memoryview,
    header: BatchHeader,
    offset_map: OffsetMap,
    drop_tombstones: bool,
    result: _GroupResult,
    fates: _Fates | None = None,
) -> bytes | memoryview | None:
    """The batch with obsolete records removed: the same bytes when nothing goes, None when all do.
    Batches must come in log order: a marker's fate depends on what was kept of its transaction."""
    fates = fates or _Fates(NO_FACTS)
    if header.is_control:
        return _clean_marker(batch, header, drop_tombstones, result, fates)
    out = _clean_data_batch(batch, header, offset_map, drop_tombstones, result, fates)
    if header.is_transactional and out is not None:
        fates.txn_kept.add(header.producer_id)
    return out


def _clean_marker(
    batch: memoryview, header: BatchHeader, drop_tombstones: bool, result: _GroupResult, fates: _Fates
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


def _clean_data_batch(
    batch: memoryview,
    header: BatchHeader,
    offset_map: OffsetMap,
    drop_tombstones: bool,
    result: _GroupResult,
    fates: _Fates,
) -> bytes | memoryview | None:
    fate = fates.of(header)
    if fate == _KEEP:
        decode_batch(batch)  # copied byte for byte, but never a corrupt one
        return batch
    _, records = decode_batch(batch)
    kept: list[Record] = []
    for record in records if fate == _CLEAN else ():
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


RunOnOwner = Callable[[Callable[[], T]], T]


def _direct(fn: Callable[[], T]) -> T:
    return fn()


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """What the rewrite needs of a segment, as plain data so it can go to a worker process."""

    base_offset: int
    next_offset: int
    size_bytes: int
    log_path: str


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
    fates = _Fates(job.facts)
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
    fates: _Fates,
) -> PreparedGroup:
    config, now_ms, first_dirty = job.config, job.now_ms, job.first_dirty
    base = group[0].base_offset
    cleaned = FileSegment(cleaning, base, config.index_interval_bytes, create=True)
    result = _GroupResult()
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
            for batch, header in _iter_segment_batches(segment, throttler):
                out = _clean_batch(batch, header, offset_map, drop_tombstones, result, fates)
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


def clean_partition(
    log: DiskPartitionLog,
    config: TopicConfig,
    now_ms: int,
    *,
    dedupe_buffer_size: int = 128 * 1024 * 1024,
    io_max_bytes_per_second: float = 0,
    run_on_owner: RunOnOwner[Any] = _direct,
    crash_point: Callable[[str], None] = lambda step: None,
    stats: CleanerStats | None = None,
    plan: Plan | None = None,
    prepare: Prepare = prepare_cleaning,
    facts: TxnFacts = NO_FACTS,
) -> bool:
    """One cleaning pass over `log` if its plan says it is due; True when it ran.

    `prepare` does the reading and writing (`prepare_cleaning`, in this thread or a worker process);
    each swap then runs through `run_on_owner` on the thread that owns the log. `crash_point(step)` is
    called between the steps of the swap protocol (tests raise there to simulate a crash).
    """
    stats = stats if stats is not None else CleanerStats()
    plan = plan or plan_cleaning(log, config, now_ms)
    if not plan.worth_cleaning(config):
        return False
    started = time.monotonic()
    checkpoint = log.cleaner_checkpoint
    first_dirty = plan.first_dirty_offset
    refs = [SegmentRef(s.base_offset, s.next_offset, s.size_bytes, str(s.log_path)) for s in plan.segments]
    job = CleaningJob(
        str(log.directory),
        refs,
        first_dirty,
        dict(checkpoint.segments),
        config,
        now_ms,
        dedupe_buffer_size,
        io_max_bytes_per_second,
        facts,
    )
    cleaning = log.directory / CLEANING_DIR
    try:
        prepared = prepare(job)
    except BaseException:
        _discard(cleaning)  # a failed pass (a full disk, corrupt data, a stop) leaves no files behind
        raise
    stats.bytes_read += prepared.bytes_read
    crash_point("cleaned-written")
    by_base = {segment.base_offset: segment for segment in plan.segments}
    cleaning = log.directory / CLEANING_DIR
    new_entries: dict[int, tuple[int, bool]] = {}
    try:
        for group in prepared.groups:
            if group.written:
                cleaned = _open_cleaned(cleaning, group.replaced[0], config.index_interval_bytes)
                if not _swap(
                    log, [by_base[base] for base in group.replaced], cleaned, run_on_owner, crash_point
                ):
                    raise CleaningAborted(f"{log.directory}: segments changed during cleaning")
                stats.bytes_written += cleaned.size_bytes
                stats.records_removed += group.records_removed
                stats.segments_swapped += len(group.replaced)
            new_entries[group.replaced[0]] = group.entry
    except CleaningAborted:
        _discard(cleaning)
        raise
    _discard(cleaning)
    remaining = {s.base_offset for s in log.cleanable_segments()}
    segments_state = {base: state for base, state in checkpoint.segments.items() if base in remaining}
    segments_state.update(new_entries)
    updated = CleanerCheckpoint(max(prepared.map_end, first_dirty), now_ms, segments_state)
    updated.write(log.directory)
    log.cleaner_checkpoint = updated
    stats.passes += 1
    stats.last_pass_duration_ms = int((time.monotonic() - started) * 1000)
    return True


def _discard(cleaning: Path) -> None:
    """Cleaned files that were not swapped in (a later pass or the next start would remove them too)."""
    for leftover in cleaning.iterdir() if cleaning.exists() else ():
        leftover.unlink(missing_ok=True)


def _open_cleaned(cleaning: Path, base: int, index_interval_bytes: int) -> FileSegment:
    segment = FileSegment(cleaning, base, index_interval_bytes, create=False)
    if not (segment.load_indexes(sealed=True) and segment.resume_after_index(None)):
        segment.recover()  # written and fsynced by the worker, so this only rebuilds the indexes
    return segment


def _swap(
    log: DiskPartitionLog,
    replaced: list[FileSegment],
    cleaned: FileSegment,
    run_on_owner: RunOnOwner[Any],
    crash_point: Callable[[str], None],
) -> bool:
    manifest_pending = cleaned.directory / (SWAP_MANIFEST + ".pending")
    document = {"base": cleaned.base_offset, "replaced": [segment.base_offset for segment in replaced]}
    write_atomically(manifest_pending, json.dumps(document).encode())
    crash_point("manifest-prepared")
    try:
        swapped = run_on_owner(lambda: log.swap_cleaned(replaced, cleaned, manifest_pending, crash_point))
    except BaseException:
        cleaned.close()
        raise
    if not swapped:
        cleaned.delete()
        manifest_pending.unlink(missing_ok=True)
        return False
    crash_point("swapped")
    # The moves after the commit are redone at start until the manifest goes; make them durable first.
    sync_directory(log.directory)
    (log.directory / SWAP_MANIFEST).unlink(missing_ok=True)
    sync_directory(log.directory)
    return True
