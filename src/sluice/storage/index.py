"""Sparse per-segment indexes: offset -> file position and timestamp -> offset (Kafka's formats).

The active segment's indexes live in a bytearray and are written to their files in bulk: when the
segment is sealed and made durable, or on clean close. Indexes stay in the heap (about 0.5% of the log at
the default index interval) rather than memory-mapped: Python's mmap holds a duplicate file descriptor per
mapping, which tripled the descriptors a log of many segments needs. A file may lag its log after a crash; the loader
rescans every segment from the recovery point and rebuilds indexes that are missing, torn or
inconsistent, so the files are hints for speed, never the source of truth.

Both layouts are also in docs/storage.md, with every other file of the data directory.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Self

from sluice.storage.files import write_file

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _SparseIndex:
    """Fixed-size big-endian entries in a growable bytearray, held in the heap (a sealed segment's too)."""

    ENTRY: struct.Struct

    def __init__(self, base_offset: int, buffer: bytearray | None = None) -> None:
        self.base_offset = base_offset
        self._buffer: bytearray = buffer if buffer is not None else bytearray()

    @classmethod
    def load(cls, path: Path, base_offset: int) -> Self | None:
        """The file's entries without trailing all-zero ones (preallocated or zero-filled space); None
        when the file is missing or its size is not a whole number of entries (torn write).
        """
        entry_size = cls.ENTRY.size
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            if size % entry_size:
                return None
            buffer = bytearray(os.pread(fd, size, 0))
        finally:
            os.close(fd)
        used = size
        zero = bytes(entry_size)
        while used and buffer[used - entry_size : used] == zero:
            used -= entry_size
        del buffer[used:]
        return cls(base_offset, buffer)

    def __len__(self) -> int:
        return len(self._buffer) // self.ENTRY.size

    def _raw(self, n: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._buffer, n * self.ENTRY.size)  # type: ignore[return-value]

    def _append_raw(self, first: int, second: int) -> None:
        self._buffer += self.ENTRY.pack(first, second)

    def copy(self) -> Self:
        return type(self)(self.base_offset, bytearray(self._buffer))

    def write(self, path: Path, *, sync: bool, unless_same: bool = False) -> None:
        """Replace the file's entries; with `unless_same`, leave a file that already holds them alone
        (recovery rewrites many indexes, and truncating a file costs more than reading it)."""
        if unless_same:
            try:
                if path.read_bytes() == self._buffer:
                    return
            except FileNotFoundError:
                pass
        write_file(path, self._buffer, sync=sync)


class OffsetIndex(_SparseIndex):
    """Sparse offset index of one segment, file `<base offset>.index`.

    Entries are 8 bytes, big-endian: relative offset int32 (a batch's baseOffset minus the segment's
    base offset) and position int32 (that batch's byte position in the `.log` file). Both strictly
    increase. The first batch never gets an entry (position 0 is implied); a batch gets one when more
    than index.interval.bytes were appended since the previous entry, as in Kafka's LogSegment. Unlike
    Kafka, which indexes a batch's last offset, the entry names the batch's base offset, so a lookup lands
    on the batch boundary at or before the target.
    """

    ENTRY = _OFFSET_ENTRY

    def entry(self, n: int) -> tuple[int, int]:
        relative, position = self._raw(n)
        return self.base_offset + relative, position

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or the segment start when there are none."""
        return self.entry(len(self) - 1) if self._buffer else (self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        self._append_raw(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= `offset`, else the segment start."""
        low, high = 0, len(self)
        while low < high:
            middle = (low + high) // 2
            if self.entry(middle)[0] <= offset:
                low = middle + 1
            else:
                high = middle
        return self.entry(low - 1) if low else (self.base_offset, 0)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before byte `position`, else the segment start."""
        low, high = 0, len(self)
        while low < high:
            middle = (low + high) // 2
            if self.entry(middle)[1] <= position:
                low = middle + 1
            else:
                high = middle
        return self.entry(low - 1) if low else (self.base_offset, 0)

    def problem(self, log_size: int, *, thorough: bool = True) -> str | None:
        """Why the entries cannot describe a log of `log_size` bytes, or None if they can. Without
        `thorough` only the first and last entries are checked (Kafka's sanity check for trusted files).
        """
        count = len(self)
        # An empty index is valid: a segment smaller than index.interval.bytes never gets an entry.
        entries = range(count) if thorough or count < 2 else (0, count - 1)
        previous_relative, previous_position = -1, 0
        for n in entries:
            relative, position = self._raw(n)
            if relative <= previous_relative or position <= previous_position:
                return f"entry {n} does not increase"
            if position >= log_size:
                return f"entry {n} points past the log ({position} >= {log_size})"
            previous_relative, previous_position = relative, position
        return None


class TimeIndex(_SparseIndex):
    """Sparse time index of one segment, file `<base offset>.timeindex`.

    Entries are 12 bytes, big-endian: timestamp int64 (the segment's largest batch maxTimestamp so far)
    and relative offset int32 (the base offset of the first batch that reached that timestamp, minus the
    segment's base offset). Timestamps strictly increase: an entry is added next to each offset-index
    entry only when the largest timestamp grew, plus one final entry when the segment is sealed or closed,
    so the last entry is the segment's largest timestamp. Every batch before an entry's offset has a
    smaller maxTimestamp, so a search for T may start at the last entry whose timestamp is <= T.
    """

    ENTRY = _TIME_ENTRY

    def entry(self, n: int) -> tuple[int, int]:
        timestamp, relative = self._raw(n)
        return timestamp, self.base_offset + relative

    def last_entry(self) -> tuple[int, int] | None:
        return self.entry(len(self) - 1) if self._buffer else None

    def maybe_append(self, timestamp: int, offset: int) -> None:
        last = self.last_entry()
        if last is None or timestamp > last[0]:
            self._append_raw(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset to start searching for the first batch with maxTimestamp >= `timestamp`."""
        low, high = 0, len(self)
        while low < high:
            middle = (low + high) // 2
            if self.entry(middle)[0] <= timestamp:
                low = middle + 1
            else:
                high = middle
        return self.entry(low - 1)[1] if low else self.base_offset

    def problem(self, next_offset: int, *, thorough: bool = True) -> str | None:
        """Why the entries cannot describe a segment ending before `next_offset`, or None if they can."""
        count = len(self)
        entries = range(count) if thorough or count < 2 else (0, count - 1)
        previous_timestamp, previous_relative = None, 0
        for n in entries:
            timestamp, relative = self._raw(n)
            if previous_timestamp is not None and timestamp <= previous_timestamp:
                return f"entry {n} timestamp does not increase"
            if relative < previous_relative or self.base_offset + relative >= next_offset:
                return f"entry {n} offset out of order or past the segment"
            previous_timestamp, previous_relative = timestamp, relative
        return None
