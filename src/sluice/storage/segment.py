"""One on-disk segment: `<20-digit base offset>.log` plus its `.index` and `.timeindex` (Kafka's layout).

The log file is whole v2 batches back to back, exactly as served to consumers. Appends are one
pwrite (the caller's bytes with the new baseOffset set in place, no copy); reads are one pread after a binary search of the
sparse offset index and a short header scan. Segment data is never held in memory.

The active segment's file is extended ahead of its last batch (RESERVE_BYTES at a time, sparse: no disk
space until written), so an fdatasync after an append need not also write the file's size: on ext4 that
is one I/O and one wait less per group commit. Sealing or closing the segment cuts the file back to its
last batch; after a crash, recovery cuts the zero tail (storage/reserve.py tells it from torn data).

The `.log` layout is in docs/storage.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from sluice.protocol.records import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader, parse_batch_header
from sluice.storage.api import NO_TIMESTAMP
from sluice.storage.batches import BASE_OFFSET, batch_length_at, plausible_length
from sluice.storage.damage import Damaged, DamagedOffsets, DamagedRange, scan_segment
from sluice.storage.file_cache import SEGMENT_FILES, CachedFile, FileCache
from sluice.storage.index import OffsetIndex, TimeIndex
from sluice.storage.reserve import RESERVE_BYTES, reserved_tail, scan_limit

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# Header scans between sparse index entries read this much at a time; index.interval.bytes is 4 KiB.
_SCAN_CHUNK = 16 * 1024
_sync_data = getattr(os, "fdatasync", os.fsync)
_sync_all = os.fsync
def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class FileSegment:
    """A segment backed by files in a partition directory. Its log file is opened on demand through a
    `FileCache` (a process-wide one unless given), so an idle segment holds no descriptor.

    Threading: `append`, reads, `seal` and recovery run on the event-loop thread. `sync` and
    `make_durable` may run on the flush thread: `sync` only fsyncs the descriptor, and `make_durable` is
    only called for sealed segments, whose indexes no longer change.
    """

    __slots__ = (
        "__weakref__",
        "_bytes_since_index_entry",
        "_closed",
        "_created_ms",
        "_damaged_at",
        "_file",
        "_files",
        "_first_batch_timestamp",
        "_indexes_trusted",
        "_reserved_end",
        "_resized",
        "base_offset",
        "damaged",
        "directory",
        "index_interval_bytes",
        "max_timestamp",
        "next_offset",
        "offset_index",
        "offset_of_max_timestamp",
        "size_bytes",
        "time_index",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        *,
        create: bool,
        files: FileCache = SEGMENT_FILES,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._files = files
        self._file = CachedFile(directory / segment_file_name(base_offset, LOG_SUFFIX), create=create)
        if create:
            with files.use(self._file):  # creates it now: a name clash must fail here, not at first write
                pass
            self.size_bytes = 0
        else:
            self.size_bytes = os.stat(self._file.path).st_size
        self._reserved_end = self.size_bytes  # the file's size, whatever the batches fill of it
        self._resized = False  # the file's size changed since the last sync: that one is a full fsync
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.offset_index = OffsetIndex(base_offset)
        self.time_index = TimeIndex(base_offset)
        self._bytes_since_index_entry = 0
        self._first_batch_timestamp: int | None = None
        self._created_ms = int(time.time() * 1000)
        self._indexes_trusted = False
        self._closed = False
        # Byte ranges that are not intact batches (see damage.py), by start position.
        self.damaged: list[DamagedRange] = []
        self._damaged_at: dict[int, DamagedRange] = {}

    @property
    def log_path(self) -> Path:
        return self._file.path

    @property
    def index_path(self) -> Path:
        return self.directory / segment_file_name(self.base_offset, INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return self.directory / segment_file_name(self.base_offset, TIME_INDEX_SUFFIX)

    def _pread(self, size: int, position: int) -> bytes:
        with self._files.use(self._file) as fd:
            return os.pread(fd, size, position)

    # --- appending ----------------------------------------------------------------------------------

    def append(
        self,
        batch: bytes | bytearray | memoryview,
        header: BatchHeader,
        base_offset: int,
        append_time_ms: int,
    ) -> None:
        position = self.size_bytes
        if position == 0:
            self._first_batch_timestamp = header.max_timestamp
            self._created_ms = append_time_ms
        size = len(batch)
        if position + size > self._reserved_end:
            self._reserve(position + size)
        # The base offset is set in the caller's buffer when it may be (a produce request's receive buffer,
        # which nothing reads after the append), so the batch goes out in one buffer without a copy.
        data = batch if type(batch) is memoryview and not batch.readonly else memoryview(bytearray(batch))
        BASE_OFFSET.pack_into(data, 0, base_offset)
        written = self._files.pwrite(self._file, data, position)
        if written < size:  # regular files rarely write short, but a full disk can
            with self._files.use(self._file) as fd:
                while written < size:
                    written += os.pwrite(fd, data[written:], position + written)
        self._track(base_offset, header.last_offset_delta, header.max_timestamp, position, size)

    def _reserve(self, end: int) -> None:
        """Extend the file to the RESERVE_BYTES boundary past `end`. Without it (a file system that refuses)
        the appends grow the file themselves, as they would anyway."""
        reserved = (end // RESERVE_BYTES + 1) * RESERVE_BYTES
        try:
            with self._files.use(self._file) as fd:
                os.ftruncate(fd, reserved)
        except OSError:
            return
        self._reserved_end = reserved
        self._resized = True

    def _cut_reserve(self) -> None:
        """Cut the file back to its last batch (the next sync makes that size durable)."""
        if self._reserved_end > self.size_bytes:
            with self._files.use(self._file) as fd:
                os.ftruncate(fd, self.size_bytes)
            self._reserved_end = self.size_bytes
            self._resized = True

    def _track(
        self, base_offset: int, last_offset_delta: int, max_timestamp: int, position: int, size: int
    ) -> None:
        """Account for a batch now at `position`: offsets, largest timestamp, sparse index entries."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self.next_offset = base_offset + last_offset_delta + 1
        self.size_bytes = position + size

    # --- reading ------------------------------------------------------------------------------------

    def _headers_at(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from the batch boundary `position` to the end of the file."""
        end = self.size_bytes
        buffer = b""
        buffer_start = position
        damaged_at = self._damaged_at
        while position + BATCH_HEADER_SIZE <= end:
            if damaged_at and position in damaged_at:
                position = damaged_at[position].end
                continue
            relative = position - buffer_start
            if len(buffer) - relative < BATCH_HEADER_SIZE:
                buffer = self._pread(_SCAN_CHUNK, position)
                buffer_start, relative = position, 0
                if len(buffer) < BATCH_HEADER_SIZE:
                    return
            header = parse_batch_header(buffer, relative)
            if not plausible_length(header.batch_length):
                return  # only outside damage to a trusted file gets here; never loop backwards
            yield position, header
            position += header.size

    def _locate(self, offset: int) -> tuple[int, BatchHeader]:
        """Position and header of the batch containing `offset` (the first batch if `offset` is earlier)."""
        for damaged in self.damaged:
            if damaged.holds(offset):
                raise DamagedOffsets(damaged, self.log_path)
        _, start = self.offset_index.lookup(offset)
        for position, header in self._headers_at(start):
            if header.last_offset >= offset:
                if header.base_offset > offset and start:
                    break  # the index sent us past the batch: damaged but trusted, scan from the start
                return position, header
        for position, header in self._headers_at(0):
            if header.last_offset >= offset:
                return position, header
        for damaged in self.damaged:
            if damaged.end_offset > offset:
                # No intact batch from `offset` on, but damage is: that is what a reader reaches next (a gap
                # a power loss left before a segment it tore from the start).
                raise DamagedOffsets(damaged, self.log_path)
        raise LookupError(f"offset {offset} is not in segment {self.log_path}")

    def read(self, offset: int, max_bytes: int) -> bytes:
        start, header = self._locate(offset)
        limit = start + max(max_bytes, header.size)
        if limit >= self.size_bytes:
            end = self.size_bytes
        else:
            # Jump to the last indexed batch boundary within the limit, then scan the few headers after it.
            _, end = self.offset_index.lookup_position(limit)
            end = max(end, start)
            for position, batch_header in self._headers_at(end):
                if position + batch_header.size > limit:
                    break
                end = position + batch_header.size
        for damaged in self.damaged:
            if start < damaged.start < end:
                end = damaged.start  # a batch boundary: the damage begins right after an intact batch
        return self._pread(end - start, start)

    def batch_containing(self, offset: int) -> bytes:
        position, header = self._locate(offset)
        return self._pread(header.size, position)

    def find_batch_by_timestamp(self, timestamp_ms: int, min_offset: int) -> bytes | None:
        start_offset = max(self.time_index.lookup(timestamp_ms), min_offset)
        _, start = self.offset_index.lookup(start_offset)
        for position, header in self._headers_at(start):
            if header.last_offset >= min_offset and header.max_timestamp >= timestamp_ms:
                return self._pread(header.size, position)
        return None

    def headers_from(self, offset: int) -> Iterator[BatchHeader]:
        _, position = self.offset_index.lookup(offset)
        for _, header in self._headers_at(position):
            if header.last_offset >= offset:
                yield header

    def roll_age_ms(self, now_ms: int, incoming_max_timestamp: int) -> int:
        if self._first_batch_timestamp is None and self.size_bytes >= BATCH_HEADER_SIZE:
            self._first_batch_timestamp = parse_batch_header(self._pread(BATCH_HEADER_SIZE, 0)).max_timestamp
        if self._first_batch_timestamp is not None and self._first_batch_timestamp >= 0:
            return incoming_max_timestamp - self._first_batch_timestamp
        return now_ms - self._created_ms

    def retention_timestamp_ms(self) -> int:
        if self.max_timestamp > 0:
            return self.max_timestamp
        return os.stat(self._file.path).st_mtime_ns // 1_000_000

    # --- durability ---------------------------------------------------------------------------------

    def seal(self) -> None:
        """Cut the file back to its last batch, and add the final time-index entry so the last entry is the
        segment's largest timestamp."""
        self._cut_reserve()
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def sync(self) -> None:
        with self._files.use(self._file) as fd:  # pinned: the cache never closes it under the fsync
            if self._resized:
                # Cleared first: a resize while this fsync runs sets it again for the next sync.
                self._resized = False
                _sync_all(fd)  # the size too, whatever the file system counts as data
            else:
                _sync_data(fd)

    def sync_size(self) -> None:
        """Make a size the segment changed (seal cut its file) durable."""
        if self._resized:
            self.sync()

    def write_indexes(self, *, sync: bool, unless_same: bool = False) -> None:
        self.offset_index.write(self.index_path, sync=sync, unless_same=unless_same)
        self.time_index.write(self.time_index_path, sync=sync, unless_same=unless_same)

    def make_durable(self) -> None:
        """For a sealed segment: fsync its log and write and fsync its indexes."""
        self.sync()
        self.write_indexes(sync=True)

    def relocate(self, directory: Path) -> None:
        """Move this segment's files into `directory` (same file system), indexes first and the log last,
        so a log in `directory` never comes with another segment's indexes. An open descriptor stays valid.
        """
        moves = [
            (self.index_path, directory / self.index_path.name),
            (self.time_index_path, directory / self.time_index_path.name),
            (self.log_path, directory / self.log_path.name),
        ]
        for source, target in moves:
            if source.exists():
                os.replace(source, target)
            else:
                target.unlink(missing_ok=True)
        self.directory = directory
        self._file.path = moves[-1][1]

    def close(self, *, keep_reserve: bool = False) -> None:
        if not self._closed:
            if not keep_reserve:
                try:
                    self._cut_reserve()
                except OSError:
                    pass  # recovery cuts it at the next start
            self._closed = True
            self._files.close(self._file)

    def delete(self) -> None:
        self.close(keep_reserve=True)
        for path in (self.log_path, self.index_path, self.time_index_path):
            path.unlink(missing_ok=True)

    # --- recovery -----------------------------------------------------------------------------------

    def load_indexes(self, *, sealed: bool) -> bool:
        """Adopt the index files if they exist and fit the log; False means they must be rebuilt.

        A sealed segment's files are only sanity-checked (first and last entries), so opening many
        segments costs no scan of every index; the active segment's are checked entry by entry, and
        appended to from then on.
        """
        self._indexes_trusted = sealed
        offset_index = OffsetIndex.load(self.index_path, self.base_offset)
        time_index = TimeIndex.load(self.time_index_path, self.base_offset)
        if offset_index is None or time_index is None:
            return False
        self.offset_index, self.time_index = offset_index, time_index
        if offset_index.problem(self.size_bytes, thorough=not sealed):
            return False
        if offset_index:
            # The last entry must land on a batch with that base offset.
            offset, position = offset_index.last_entry()
            head = self._pread(LOG_OVERHEAD, position)
            if len(head) < LOG_OVERHEAD or BASE_OFFSET.unpack_from(head)[0] != offset:
                return False
        return True

    def set_damage(self, ranges: list[DamagedRange]) -> None:
        self.damaged = sorted(ranges, key=lambda r: r.start)
        self._damaged_at = {r.start: r for r in self.damaged}

    def resume_after_index(self, expected_next_offset: int | None, stop_at: int | None = None) -> bool:
        """Rebuild in-memory state of a trusted segment by scanning headers after its last index entry.

        Checks structure only (lengths, magic, increasing offsets), not CRCs; recorded damaged ranges are
        stepped over. False means the tail or the time index does not fit and the segment needs `recover`.
        Offsets may have gaps (compaction), so a sealed segment may end below `expected_next_offset`.
        With `stop_at`, only the bytes before it are adopted (it must be a batch boundary); `recover_tail`
        then checks the rest.
        """
        offset, position = self.offset_index.last_entry()
        last = self.time_index.last_entry()
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last
        self.next_offset = offset
        self._bytes_since_index_entry = 0
        end = self.size_bytes if stop_at is None else stop_at
        if end > self.size_bytes or position > end:
            return False
        for damaged in self.damaged:
            if damaged.end > end:
                return False
            if damaged.start < position:
                self.next_offset = max(self.next_offset, damaged.end_offset)
        while position < end:
            damaged = self._damaged_at.get(position)
            if damaged is not None:
                position = damaged.end
                self.next_offset = max(self.next_offset, damaged.end_offset)
                self._bytes_since_index_entry = self.index_interval_bytes + 1
                continue
            head = self._pread(BATCH_HEADER_SIZE, position)
            if len(head) < BATCH_HEADER_SIZE or not plausible_length(batch_length_at(head, 0)):
                return False
            header = parse_batch_header(head)
            if header.magic != 2 or header.base_offset < self.next_offset or position + header.size > end:
                return False
            self._track(
                header.base_offset, header.last_offset_delta, header.max_timestamp, position, header.size
            )
            position += header.size
        self.size_bytes = end
        if expected_next_offset is not None and self.next_offset > expected_next_offset:
            return False
        return not self.time_index.problem(self.next_offset, thorough=not self._indexes_trusted)

    def recover_tail(self, position: int) -> tuple[int, list[DamagedRange]]:
        """After `resume_after_index(None, stop_at=position)`: validate the active segment's batches from
        `position` on as `recover` does (a torn tail is truncated, damage before it recorded)."""
        self._indexes_trusted = False
        return self._scan_from(position, None)

    def recover(self, offset_limit: int | None = None) -> tuple[int, list[DamagedRange]]:
        """Validate every batch (length, magic, CRC-32C, increasing offsets), rebuild both indexes and
        record damaged stretches, resynchronising on the next intact batch after each (see damage.py).

        `offset_limit` is the next segment's base offset, None for the active segment. Only a damaged
        stretch at the very end of the active segment (a torn write, never acknowledged) is truncated; in a
        sealed segment it is kept and recorded, its offsets running up to `offset_limit`.
        Returns (bytes truncated, damaged ranges found).
        """
        self.offset_index = OffsetIndex(self.base_offset)
        self.time_index = TimeIndex(self.base_offset)
        self._indexes_trusted = False
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.next_offset = self.base_offset
        self._bytes_since_index_entry = 0
        self.damaged = []
        return self._scan_from(0, offset_limit)

    def _scan_from(self, start: int, offset_limit: int | None) -> tuple[int, list[DamagedRange]]:
        with self._files.use(self._file) as fd:
            return self._scan_locked(fd, start, offset_limit)

    def _scan_locked(self, fd: int, start: int, offset_limit: int | None) -> tuple[int, list[DamagedRange]]:
        file_size = os.fstat(fd).st_size
        # A reserving file's trailing hole (up to 1 MiB of zeros per partition after a crash) is not read.
        scan_end = scan_limit(fd, start, file_size)
        damaged: list[DamagedRange] = []
        end, reserved = scan_end, file_size - scan_end  # a trailing hole holds no batch: cut, not torn
        for found in scan_segment(fd, scan_end, self.next_offset, offset_limit, start):
            if isinstance(found, Damaged):
                if found.end >= scan_end:
                    tail = reserved_tail(fd, found.start, file_size)
                    # A sealed segment whose cut the crash undid ends in nothing but reserved space.
                    if offset_limit is None or tail == file_size - found.start:
                        end, reserved = found.start, tail
                        break
                    end_offset = offset_limit
                else:
                    end_offset = self._header_at(found.end).base_offset
                damaged.append(
                    DamagedRange(self.base_offset, found.start, found.end, self.next_offset, end_offset)
                )
                self.next_offset = end_offset
                # The first batch after the damage gets an index entry, so lookups land past it.
                self._bytes_since_index_entry = self.index_interval_bytes + 1
                continue
            header = found.header
            self._track(
                header.base_offset,
                header.last_offset_delta,
                header.max_timestamp,
                found.position,
                header.size,
            )
        self.size_bytes = self._reserved_end = end
        self.set_damage([d for d in self.damaged if d.end <= start] + damaged)
        truncated = file_size - end
        if truncated:
            os.ftruncate(fd, end)
            self._resized = True
        return truncated - reserved, damaged
        self._first_batch_timestamp = None

    def _header_at(self, position: int) -> BatchHeader:
        return parse_batch_header(self._pread(BATCH_HEADER_SIZE, position))
